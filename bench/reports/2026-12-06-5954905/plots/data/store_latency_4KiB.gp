# run from plots/: gnuplot data/store_latency_4KiB.gp
set terminal pngcairo size 1400,1000 font "sans,10" noenhanced
set output 'store_latency_4KiB.png'
set multiplot layout 2,2 title "store: latency vs requests in flight, 4KiB values" font ",14"
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "tcp put"
set logscale x 2
set logscale y 10
set key maxrows 2
set xlabel "requests in flight"
set ylabel "latency (us)"
set xtics ("1" 1, "8" 8, "32" 32)
set xrange [0.7692307692307692:41.6]
plot 'data/store_lat_tcp_put_4KiB.dat' using 1:2 title "ours p50" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_lat_tcp_put_4KiB.dat' using 1:3 title "ours p99" with linespoints lw 2 pt 5 lc rgb '#d62728', \
     'data/store_lat_tcp_put_4KiB.dat' using 1:($4>0?$4:1/0) title "redis tcp p50" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/store_lat_tcp_put_4KiB.dat' using 1:($5>0?$5:1/0) title "redis tcp p99" with linespoints lw 2 dt 2 pt 4 lc rgb '#d62728'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "shm put"
set logscale x 2
set logscale y 10
set key maxrows 2
set xlabel "requests in flight"
set ylabel "latency (us)"
set xtics ("1" 1, "8" 8, "32" 32)
set xrange [0.7692307692307692:41.6]
plot 'data/store_lat_shm_put_4KiB.dat' using 1:2 title "ours p50" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_lat_shm_put_4KiB.dat' using 1:3 title "ours p99" with linespoints lw 2 pt 5 lc rgb '#d62728', \
     'data/store_lat_shm_put_4KiB.dat' using 1:($4>0?$4:1/0) title "redis unix socket p50" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/store_lat_shm_put_4KiB.dat' using 1:($5>0?$5:1/0) title "redis unix socket p99" with linespoints lw 2 dt 2 pt 4 lc rgb '#d62728'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "tcp get"
set logscale x 2
set logscale y 10
set key maxrows 2
set xlabel "requests in flight"
set ylabel "latency (us)"
set xtics ("1" 1, "8" 8, "32" 32)
set xrange [0.7692307692307692:41.6]
plot 'data/store_lat_tcp_get_4KiB.dat' using 1:2 title "ours p50" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_lat_tcp_get_4KiB.dat' using 1:3 title "ours p99" with linespoints lw 2 pt 5 lc rgb '#d62728', \
     'data/store_lat_tcp_get_4KiB.dat' using 1:($4>0?$4:1/0) title "redis tcp p50" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/store_lat_tcp_get_4KiB.dat' using 1:($5>0?$5:1/0) title "redis tcp p99" with linespoints lw 2 dt 2 pt 4 lc rgb '#d62728'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "shm get"
set logscale x 2
set logscale y 10
set key maxrows 2
set xlabel "requests in flight"
set ylabel "latency (us)"
set xtics ("1" 1, "8" 8, "32" 32)
set xrange [0.7692307692307692:41.6]
plot 'data/store_lat_shm_get_4KiB.dat' using 1:2 title "ours p50" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_lat_shm_get_4KiB.dat' using 1:3 title "ours p99" with linespoints lw 2 pt 5 lc rgb '#d62728', \
     'data/store_lat_shm_get_4KiB.dat' using 1:($4>0?$4:1/0) title "redis unix socket p50" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/store_lat_shm_get_4KiB.dat' using 1:($5>0?$5:1/0) title "redis unix socket p99" with linespoints lw 2 dt 2 pt 4 lc rgb '#d62728'
unset multiplot
set terminal svg size 1400,1000 font "sans,10" noenhanced dynamic
set output 'store_latency_4KiB.svg'
set multiplot layout 2,2 title "store: latency vs requests in flight, 4KiB values" font ",14"
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "tcp put"
set logscale x 2
set logscale y 10
set key maxrows 2
set xlabel "requests in flight"
set ylabel "latency (us)"
set xtics ("1" 1, "8" 8, "32" 32)
set xrange [0.7692307692307692:41.6]
plot 'data/store_lat_tcp_put_4KiB.dat' using 1:2 title "ours p50" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_lat_tcp_put_4KiB.dat' using 1:3 title "ours p99" with linespoints lw 2 pt 5 lc rgb '#d62728', \
     'data/store_lat_tcp_put_4KiB.dat' using 1:($4>0?$4:1/0) title "redis tcp p50" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/store_lat_tcp_put_4KiB.dat' using 1:($5>0?$5:1/0) title "redis tcp p99" with linespoints lw 2 dt 2 pt 4 lc rgb '#d62728'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "shm put"
set logscale x 2
set logscale y 10
set key maxrows 2
set xlabel "requests in flight"
set ylabel "latency (us)"
set xtics ("1" 1, "8" 8, "32" 32)
set xrange [0.7692307692307692:41.6]
plot 'data/store_lat_shm_put_4KiB.dat' using 1:2 title "ours p50" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_lat_shm_put_4KiB.dat' using 1:3 title "ours p99" with linespoints lw 2 pt 5 lc rgb '#d62728', \
     'data/store_lat_shm_put_4KiB.dat' using 1:($4>0?$4:1/0) title "redis unix socket p50" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/store_lat_shm_put_4KiB.dat' using 1:($5>0?$5:1/0) title "redis unix socket p99" with linespoints lw 2 dt 2 pt 4 lc rgb '#d62728'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "tcp get"
set logscale x 2
set logscale y 10
set key maxrows 2
set xlabel "requests in flight"
set ylabel "latency (us)"
set xtics ("1" 1, "8" 8, "32" 32)
set xrange [0.7692307692307692:41.6]
plot 'data/store_lat_tcp_get_4KiB.dat' using 1:2 title "ours p50" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_lat_tcp_get_4KiB.dat' using 1:3 title "ours p99" with linespoints lw 2 pt 5 lc rgb '#d62728', \
     'data/store_lat_tcp_get_4KiB.dat' using 1:($4>0?$4:1/0) title "redis tcp p50" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/store_lat_tcp_get_4KiB.dat' using 1:($5>0?$5:1/0) title "redis tcp p99" with linespoints lw 2 dt 2 pt 4 lc rgb '#d62728'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "shm get"
set logscale x 2
set logscale y 10
set key maxrows 2
set xlabel "requests in flight"
set ylabel "latency (us)"
set xtics ("1" 1, "8" 8, "32" 32)
set xrange [0.7692307692307692:41.6]
plot 'data/store_lat_shm_get_4KiB.dat' using 1:2 title "ours p50" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_lat_shm_get_4KiB.dat' using 1:3 title "ours p99" with linespoints lw 2 pt 5 lc rgb '#d62728', \
     'data/store_lat_shm_get_4KiB.dat' using 1:($4>0?$4:1/0) title "redis unix socket p50" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/store_lat_shm_get_4KiB.dat' using 1:($5>0?$5:1/0) title "redis unix socket p99" with linespoints lw 2 dt 2 pt 4 lc rgb '#d62728'
unset multiplot
unset output
