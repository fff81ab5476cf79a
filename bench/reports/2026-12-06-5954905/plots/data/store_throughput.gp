# run from plots/: gnuplot data/store_throughput.gp
set terminal pngcairo size 1400,1000 font "sans,10" noenhanced
set output 'store_throughput.png'
set multiplot layout 2,2 title "store: remote get/put throughput vs value size (ours solid, Redis dashed)" font ",14"
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "tcp put"
set key maxrows 3
set logscale x 2
set logscale y 10
set xlabel "value size"
set ylabel "MiB/s"
set xrange [2925.714285714286:1468006.4]
set xtics ("4KiB" 4096, "64KiB" 65536, "1MiB" 1048576)
plot 'data/store_thr_tcp_put_c1.dat' using 1:2 title "ours, 1 in flight" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_thr_tcp_put_c8.dat' using 1:2 title "ours, 8 in flight" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/store_thr_tcp_put_c32.dat' using 1:2 title "ours, 32 in flight" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/store_thr_tcp_put_c1.dat' using 1:($3>0?$3:1/0) title "redis tcp, 1 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/store_thr_tcp_put_c8.dat' using 1:($3>0?$3:1/0) title "redis tcp, 8 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728', \
     'data/store_thr_tcp_put_c32.dat' using 1:($3>0?$3:1/0) title "redis tcp, 32 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#2ca02c'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "shm put"
set key maxrows 3
set logscale x 2
set logscale y 10
set xlabel "value size"
set ylabel "MiB/s"
set xrange [2925.714285714286:1468006.4]
set xtics ("4KiB" 4096, "64KiB" 65536, "1MiB" 1048576)
plot 'data/store_thr_shm_put_c1.dat' using 1:2 title "ours, 1 in flight" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_thr_shm_put_c8.dat' using 1:2 title "ours, 8 in flight" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/store_thr_shm_put_c32.dat' using 1:2 title "ours, 32 in flight" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/store_thr_shm_put_c1.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 1 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/store_thr_shm_put_c8.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 8 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728', \
     'data/store_thr_shm_put_c32.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 32 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#2ca02c'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "tcp get"
set key maxrows 3
set logscale x 2
set logscale y 10
set xlabel "value size"
set ylabel "MiB/s"
set xrange [2925.714285714286:1468006.4]
set xtics ("4KiB" 4096, "64KiB" 65536, "1MiB" 1048576)
plot 'data/store_thr_tcp_get_c1.dat' using 1:2 title "ours, 1 in flight" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_thr_tcp_get_c8.dat' using 1:2 title "ours, 8 in flight" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/store_thr_tcp_get_c32.dat' using 1:2 title "ours, 32 in flight" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/store_thr_tcp_get_c1.dat' using 1:($3>0?$3:1/0) title "redis tcp, 1 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/store_thr_tcp_get_c8.dat' using 1:($3>0?$3:1/0) title "redis tcp, 8 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728', \
     'data/store_thr_tcp_get_c32.dat' using 1:($3>0?$3:1/0) title "redis tcp, 32 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#2ca02c'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "shm get"
set key maxrows 3
set logscale x 2
set logscale y 10
set xlabel "value size"
set ylabel "MiB/s"
set xrange [2925.714285714286:1468006.4]
set xtics ("4KiB" 4096, "64KiB" 65536, "1MiB" 1048576)
plot 'data/store_thr_shm_get_c1.dat' using 1:2 title "ours, 1 in flight" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_thr_shm_get_c8.dat' using 1:2 title "ours, 8 in flight" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/store_thr_shm_get_c32.dat' using 1:2 title "ours, 32 in flight" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/store_thr_shm_get_c1.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 1 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/store_thr_shm_get_c8.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 8 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728', \
     'data/store_thr_shm_get_c32.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 32 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#2ca02c'
unset multiplot
set terminal svg size 1400,1000 font "sans,10" noenhanced dynamic
set output 'store_throughput.svg'
set multiplot layout 2,2 title "store: remote get/put throughput vs value size (ours solid, Redis dashed)" font ",14"
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "tcp put"
set key maxrows 3
set logscale x 2
set logscale y 10
set xlabel "value size"
set ylabel "MiB/s"
set xrange [2925.714285714286:1468006.4]
set xtics ("4KiB" 4096, "64KiB" 65536, "1MiB" 1048576)
plot 'data/store_thr_tcp_put_c1.dat' using 1:2 title "ours, 1 in flight" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_thr_tcp_put_c8.dat' using 1:2 title "ours, 8 in flight" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/store_thr_tcp_put_c32.dat' using 1:2 title "ours, 32 in flight" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/store_thr_tcp_put_c1.dat' using 1:($3>0?$3:1/0) title "redis tcp, 1 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/store_thr_tcp_put_c8.dat' using 1:($3>0?$3:1/0) title "redis tcp, 8 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728', \
     'data/store_thr_tcp_put_c32.dat' using 1:($3>0?$3:1/0) title "redis tcp, 32 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#2ca02c'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "shm put"
set key maxrows 3
set logscale x 2
set logscale y 10
set xlabel "value size"
set ylabel "MiB/s"
set xrange [2925.714285714286:1468006.4]
set xtics ("4KiB" 4096, "64KiB" 65536, "1MiB" 1048576)
plot 'data/store_thr_shm_put_c1.dat' using 1:2 title "ours, 1 in flight" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_thr_shm_put_c8.dat' using 1:2 title "ours, 8 in flight" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/store_thr_shm_put_c32.dat' using 1:2 title "ours, 32 in flight" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/store_thr_shm_put_c1.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 1 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/store_thr_shm_put_c8.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 8 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728', \
     'data/store_thr_shm_put_c32.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 32 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#2ca02c'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "tcp get"
set key maxrows 3
set logscale x 2
set logscale y 10
set xlabel "value size"
set ylabel "MiB/s"
set xrange [2925.714285714286:1468006.4]
set xtics ("4KiB" 4096, "64KiB" 65536, "1MiB" 1048576)
plot 'data/store_thr_tcp_get_c1.dat' using 1:2 title "ours, 1 in flight" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_thr_tcp_get_c8.dat' using 1:2 title "ours, 8 in flight" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/store_thr_tcp_get_c32.dat' using 1:2 title "ours, 32 in flight" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/store_thr_tcp_get_c1.dat' using 1:($3>0?$3:1/0) title "redis tcp, 1 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/store_thr_tcp_get_c8.dat' using 1:($3>0?$3:1/0) title "redis tcp, 8 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728', \
     'data/store_thr_tcp_get_c32.dat' using 1:($3>0?$3:1/0) title "redis tcp, 32 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#2ca02c'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "shm get"
set key maxrows 3
set logscale x 2
set logscale y 10
set xlabel "value size"
set ylabel "MiB/s"
set xrange [2925.714285714286:1468006.4]
set xtics ("4KiB" 4096, "64KiB" 65536, "1MiB" 1048576)
plot 'data/store_thr_shm_get_c1.dat' using 1:2 title "ours, 1 in flight" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_thr_shm_get_c8.dat' using 1:2 title "ours, 8 in flight" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/store_thr_shm_get_c32.dat' using 1:2 title "ours, 32 in flight" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/store_thr_shm_get_c1.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 1 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/store_thr_shm_get_c8.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 8 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728', \
     'data/store_thr_shm_get_c32.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 32 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#2ca02c'
unset multiplot
unset output
