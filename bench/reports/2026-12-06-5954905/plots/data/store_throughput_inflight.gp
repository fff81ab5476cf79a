# run from plots/: gnuplot data/store_throughput_inflight.gp
set terminal pngcairo size 1400,1000 font "sans,10" noenhanced
set output 'store_throughput_inflight.png'
set multiplot layout 2,2 title "store: remote get/put ops/s vs requests in flight (ours solid, Redis dashed)" font ",14"
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "tcp put"
set logscale x 2
set logscale y 10
set xlabel "requests in flight"
set ylabel "ops/s"
set xtics ("1" 1, "8" 8, "32" 32)
set xrange [0.7692307692307692:41.6]
plot 'data/store_ops_tcp_put_4KiB.dat' using 1:2 title "ours, 4KiB" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_ops_tcp_put_64KiB.dat' using 1:2 title "ours, 64KiB" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/store_ops_tcp_put_1MiB.dat' using 1:2 title "ours, 1MiB" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/store_ops_tcp_put_4KiB.dat' using 1:($3>0?$3:1/0) title "redis tcp, 4KiB" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/store_ops_tcp_put_64KiB.dat' using 1:($3>0?$3:1/0) title "redis tcp, 64KiB" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728', \
     'data/store_ops_tcp_put_1MiB.dat' using 1:($3>0?$3:1/0) title "redis tcp, 1MiB" with linespoints lw 2 dt 2 pt 6 lc rgb '#2ca02c'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "shm put"
set logscale x 2
set logscale y 10
set xlabel "requests in flight"
set ylabel "ops/s"
set xtics ("1" 1, "8" 8, "32" 32)
set xrange [0.7692307692307692:41.6]
plot 'data/store_ops_shm_put_4KiB.dat' using 1:2 title "ours, 4KiB" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_ops_shm_put_64KiB.dat' using 1:2 title "ours, 64KiB" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/store_ops_shm_put_1MiB.dat' using 1:2 title "ours, 1MiB" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/store_ops_shm_put_4KiB.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 4KiB" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/store_ops_shm_put_64KiB.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 64KiB" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728', \
     'data/store_ops_shm_put_1MiB.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 1MiB" with linespoints lw 2 dt 2 pt 6 lc rgb '#2ca02c'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "tcp get"
set logscale x 2
set logscale y 10
set xlabel "requests in flight"
set ylabel "ops/s"
set xtics ("1" 1, "8" 8, "32" 32)
set xrange [0.7692307692307692:41.6]
plot 'data/store_ops_tcp_get_4KiB.dat' using 1:2 title "ours, 4KiB" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_ops_tcp_get_64KiB.dat' using 1:2 title "ours, 64KiB" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/store_ops_tcp_get_1MiB.dat' using 1:2 title "ours, 1MiB" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/store_ops_tcp_get_4KiB.dat' using 1:($3>0?$3:1/0) title "redis tcp, 4KiB" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/store_ops_tcp_get_64KiB.dat' using 1:($3>0?$3:1/0) title "redis tcp, 64KiB" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728', \
     'data/store_ops_tcp_get_1MiB.dat' using 1:($3>0?$3:1/0) title "redis tcp, 1MiB" with linespoints lw 2 dt 2 pt 6 lc rgb '#2ca02c'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "shm get"
set logscale x 2
set logscale y 10
set xlabel "requests in flight"
set ylabel "ops/s"
set xtics ("1" 1, "8" 8, "32" 32)
set xrange [0.7692307692307692:41.6]
plot 'data/store_ops_shm_get_4KiB.dat' using 1:2 title "ours, 4KiB" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_ops_shm_get_64KiB.dat' using 1:2 title "ours, 64KiB" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/store_ops_shm_get_1MiB.dat' using 1:2 title "ours, 1MiB" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/store_ops_shm_get_4KiB.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 4KiB" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/store_ops_shm_get_64KiB.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 64KiB" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728', \
     'data/store_ops_shm_get_1MiB.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 1MiB" with linespoints lw 2 dt 2 pt 6 lc rgb '#2ca02c'
unset multiplot
set terminal svg size 1400,1000 font "sans,10" noenhanced dynamic
set output 'store_throughput_inflight.svg'
set multiplot layout 2,2 title "store: remote get/put ops/s vs requests in flight (ours solid, Redis dashed)" font ",14"
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "tcp put"
set logscale x 2
set logscale y 10
set xlabel "requests in flight"
set ylabel "ops/s"
set xtics ("1" 1, "8" 8, "32" 32)
set xrange [0.7692307692307692:41.6]
plot 'data/store_ops_tcp_put_4KiB.dat' using 1:2 title "ours, 4KiB" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_ops_tcp_put_64KiB.dat' using 1:2 title "ours, 64KiB" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/store_ops_tcp_put_1MiB.dat' using 1:2 title "ours, 1MiB" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/store_ops_tcp_put_4KiB.dat' using 1:($3>0?$3:1/0) title "redis tcp, 4KiB" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/store_ops_tcp_put_64KiB.dat' using 1:($3>0?$3:1/0) title "redis tcp, 64KiB" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728', \
     'data/store_ops_tcp_put_1MiB.dat' using 1:($3>0?$3:1/0) title "redis tcp, 1MiB" with linespoints lw 2 dt 2 pt 6 lc rgb '#2ca02c'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "shm put"
set logscale x 2
set logscale y 10
set xlabel "requests in flight"
set ylabel "ops/s"
set xtics ("1" 1, "8" 8, "32" 32)
set xrange [0.7692307692307692:41.6]
plot 'data/store_ops_shm_put_4KiB.dat' using 1:2 title "ours, 4KiB" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_ops_shm_put_64KiB.dat' using 1:2 title "ours, 64KiB" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/store_ops_shm_put_1MiB.dat' using 1:2 title "ours, 1MiB" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/store_ops_shm_put_4KiB.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 4KiB" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/store_ops_shm_put_64KiB.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 64KiB" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728', \
     'data/store_ops_shm_put_1MiB.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 1MiB" with linespoints lw 2 dt 2 pt 6 lc rgb '#2ca02c'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "tcp get"
set logscale x 2
set logscale y 10
set xlabel "requests in flight"
set ylabel "ops/s"
set xtics ("1" 1, "8" 8, "32" 32)
set xrange [0.7692307692307692:41.6]
plot 'data/store_ops_tcp_get_4KiB.dat' using 1:2 title "ours, 4KiB" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_ops_tcp_get_64KiB.dat' using 1:2 title "ours, 64KiB" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/store_ops_tcp_get_1MiB.dat' using 1:2 title "ours, 1MiB" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/store_ops_tcp_get_4KiB.dat' using 1:($3>0?$3:1/0) title "redis tcp, 4KiB" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/store_ops_tcp_get_64KiB.dat' using 1:($3>0?$3:1/0) title "redis tcp, 64KiB" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728', \
     'data/store_ops_tcp_get_1MiB.dat' using 1:($3>0?$3:1/0) title "redis tcp, 1MiB" with linespoints lw 2 dt 2 pt 6 lc rgb '#2ca02c'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "shm get"
set logscale x 2
set logscale y 10
set xlabel "requests in flight"
set ylabel "ops/s"
set xtics ("1" 1, "8" 8, "32" 32)
set xrange [0.7692307692307692:41.6]
plot 'data/store_ops_shm_get_4KiB.dat' using 1:2 title "ours, 4KiB" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_ops_shm_get_64KiB.dat' using 1:2 title "ours, 64KiB" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/store_ops_shm_get_1MiB.dat' using 1:2 title "ours, 1MiB" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/store_ops_shm_get_4KiB.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 4KiB" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/store_ops_shm_get_64KiB.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 64KiB" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728', \
     'data/store_ops_shm_get_1MiB.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 1MiB" with linespoints lw 2 dt 2 pt 6 lc rgb '#2ca02c'
unset multiplot
unset output
