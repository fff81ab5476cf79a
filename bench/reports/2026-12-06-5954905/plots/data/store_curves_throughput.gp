# run from plots/: gnuplot data/store_curves_throughput.gp
set terminal pngcairo size 1400,1000 font "sans,10" noenhanced
set output 'store_curves_throughput.png'
set multiplot layout 1,2 title "store: remote get/put throughput vs value size (ours solid, Redis dashed)" font ",14"
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "tcp get"
set key maxrows 9
set logscale x 2
set logscale y 10
set xlabel "value size"
set ylabel "MiB/s"
set xrange [365.7142857142857:93952409.6]
set xtics ("512B" 512, "4KiB" 4096, "64KiB" 65536, "1MiB" 1048576, "4MiB" 4194304, "16MiB" 16777216, "64MiB" 67108864)
plot 'data/store_curves_thr_tcp_get_c1.dat' using 1:2 title "ours, 1 in flight" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_curves_thr_tcp_get_c2.dat' using 1:2 title "ours, 2 in flight" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/store_curves_thr_tcp_get_c4.dat' using 1:2 title "ours, 4 in flight" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/store_curves_thr_tcp_get_c8.dat' using 1:2 title "ours, 8 in flight" with linespoints lw 2 pt 7 lc rgb '#9467bd', \
     'data/store_curves_thr_tcp_get_c16.dat' using 1:2 title "ours, 16 in flight" with linespoints lw 2 pt 7 lc rgb '#ff7f0e', \
     'data/store_curves_thr_tcp_get_c32.dat' using 1:2 title "ours, 32 in flight" with linespoints lw 2 pt 7 lc rgb '#17becf', \
     'data/store_curves_thr_tcp_get_c64.dat' using 1:2 title "ours, 64 in flight" with linespoints lw 2 pt 7 lc rgb '#8c564b', \
     'data/store_curves_thr_tcp_get_c128.dat' using 1:2 title "ours, 128 in flight" with linespoints lw 2 pt 7 lc rgb '#e377c2', \
     'data/store_curves_thr_tcp_get_c256.dat' using 1:2 title "ours, 256 in flight" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_curves_thr_tcp_get_c1.dat' using 1:($3>0?$3:1/0) title "redis tcp, 1 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/store_curves_thr_tcp_get_c2.dat' using 1:($3>0?$3:1/0) title "redis tcp, 2 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728', \
     'data/store_curves_thr_tcp_get_c4.dat' using 1:($3>0?$3:1/0) title "redis tcp, 4 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#2ca02c', \
     'data/store_curves_thr_tcp_get_c8.dat' using 1:($3>0?$3:1/0) title "redis tcp, 8 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#9467bd', \
     'data/store_curves_thr_tcp_get_c16.dat' using 1:($3>0?$3:1/0) title "redis tcp, 16 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#ff7f0e', \
     'data/store_curves_thr_tcp_get_c32.dat' using 1:($3>0?$3:1/0) title "redis tcp, 32 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#17becf', \
     'data/store_curves_thr_tcp_get_c64.dat' using 1:($3>0?$3:1/0) title "redis tcp, 64 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#8c564b', \
     'data/store_curves_thr_tcp_get_c128.dat' using 1:($3>0?$3:1/0) title "redis tcp, 128 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#e377c2', \
     'data/store_curves_thr_tcp_get_c256.dat' using 1:($3>0?$3:1/0) title "redis tcp, 256 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "shm get"
set key maxrows 9
set logscale x 2
set logscale y 10
set xlabel "value size"
set ylabel "MiB/s"
set xrange [365.7142857142857:93952409.6]
set xtics ("512B" 512, "4KiB" 4096, "64KiB" 65536, "1MiB" 1048576, "4MiB" 4194304, "16MiB" 16777216, "64MiB" 67108864)
plot 'data/store_curves_thr_shm_get_c1.dat' using 1:2 title "ours, 1 in flight" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_curves_thr_shm_get_c2.dat' using 1:2 title "ours, 2 in flight" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/store_curves_thr_shm_get_c4.dat' using 1:2 title "ours, 4 in flight" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/store_curves_thr_shm_get_c8.dat' using 1:2 title "ours, 8 in flight" with linespoints lw 2 pt 7 lc rgb '#9467bd', \
     'data/store_curves_thr_shm_get_c16.dat' using 1:2 title "ours, 16 in flight" with linespoints lw 2 pt 7 lc rgb '#ff7f0e', \
     'data/store_curves_thr_shm_get_c32.dat' using 1:2 title "ours, 32 in flight" with linespoints lw 2 pt 7 lc rgb '#17becf', \
     'data/store_curves_thr_shm_get_c64.dat' using 1:2 title "ours, 64 in flight" with linespoints lw 2 pt 7 lc rgb '#8c564b', \
     'data/store_curves_thr_shm_get_c128.dat' using 1:2 title "ours, 128 in flight" with linespoints lw 2 pt 7 lc rgb '#e377c2', \
     'data/store_curves_thr_shm_get_c256.dat' using 1:2 title "ours, 256 in flight" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_curves_thr_shm_get_c1.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 1 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/store_curves_thr_shm_get_c2.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 2 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728', \
     'data/store_curves_thr_shm_get_c4.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 4 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#2ca02c', \
     'data/store_curves_thr_shm_get_c8.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 8 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#9467bd', \
     'data/store_curves_thr_shm_get_c16.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 16 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#ff7f0e', \
     'data/store_curves_thr_shm_get_c32.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 32 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#17becf', \
     'data/store_curves_thr_shm_get_c64.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 64 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#8c564b', \
     'data/store_curves_thr_shm_get_c128.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 128 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#e377c2', \
     'data/store_curves_thr_shm_get_c256.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 256 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4'
unset multiplot
set terminal svg size 1400,1000 font "sans,10" noenhanced dynamic
set output 'store_curves_throughput.svg'
set multiplot layout 1,2 title "store: remote get/put throughput vs value size (ours solid, Redis dashed)" font ",14"
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "tcp get"
set key maxrows 9
set logscale x 2
set logscale y 10
set xlabel "value size"
set ylabel "MiB/s"
set xrange [365.7142857142857:93952409.6]
set xtics ("512B" 512, "4KiB" 4096, "64KiB" 65536, "1MiB" 1048576, "4MiB" 4194304, "16MiB" 16777216, "64MiB" 67108864)
plot 'data/store_curves_thr_tcp_get_c1.dat' using 1:2 title "ours, 1 in flight" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_curves_thr_tcp_get_c2.dat' using 1:2 title "ours, 2 in flight" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/store_curves_thr_tcp_get_c4.dat' using 1:2 title "ours, 4 in flight" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/store_curves_thr_tcp_get_c8.dat' using 1:2 title "ours, 8 in flight" with linespoints lw 2 pt 7 lc rgb '#9467bd', \
     'data/store_curves_thr_tcp_get_c16.dat' using 1:2 title "ours, 16 in flight" with linespoints lw 2 pt 7 lc rgb '#ff7f0e', \
     'data/store_curves_thr_tcp_get_c32.dat' using 1:2 title "ours, 32 in flight" with linespoints lw 2 pt 7 lc rgb '#17becf', \
     'data/store_curves_thr_tcp_get_c64.dat' using 1:2 title "ours, 64 in flight" with linespoints lw 2 pt 7 lc rgb '#8c564b', \
     'data/store_curves_thr_tcp_get_c128.dat' using 1:2 title "ours, 128 in flight" with linespoints lw 2 pt 7 lc rgb '#e377c2', \
     'data/store_curves_thr_tcp_get_c256.dat' using 1:2 title "ours, 256 in flight" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_curves_thr_tcp_get_c1.dat' using 1:($3>0?$3:1/0) title "redis tcp, 1 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/store_curves_thr_tcp_get_c2.dat' using 1:($3>0?$3:1/0) title "redis tcp, 2 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728', \
     'data/store_curves_thr_tcp_get_c4.dat' using 1:($3>0?$3:1/0) title "redis tcp, 4 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#2ca02c', \
     'data/store_curves_thr_tcp_get_c8.dat' using 1:($3>0?$3:1/0) title "redis tcp, 8 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#9467bd', \
     'data/store_curves_thr_tcp_get_c16.dat' using 1:($3>0?$3:1/0) title "redis tcp, 16 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#ff7f0e', \
     'data/store_curves_thr_tcp_get_c32.dat' using 1:($3>0?$3:1/0) title "redis tcp, 32 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#17becf', \
     'data/store_curves_thr_tcp_get_c64.dat' using 1:($3>0?$3:1/0) title "redis tcp, 64 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#8c564b', \
     'data/store_curves_thr_tcp_get_c128.dat' using 1:($3>0?$3:1/0) title "redis tcp, 128 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#e377c2', \
     'data/store_curves_thr_tcp_get_c256.dat' using 1:($3>0?$3:1/0) title "redis tcp, 256 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "shm get"
set key maxrows 9
set logscale x 2
set logscale y 10
set xlabel "value size"
set ylabel "MiB/s"
set xrange [365.7142857142857:93952409.6]
set xtics ("512B" 512, "4KiB" 4096, "64KiB" 65536, "1MiB" 1048576, "4MiB" 4194304, "16MiB" 16777216, "64MiB" 67108864)
plot 'data/store_curves_thr_shm_get_c1.dat' using 1:2 title "ours, 1 in flight" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_curves_thr_shm_get_c2.dat' using 1:2 title "ours, 2 in flight" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/store_curves_thr_shm_get_c4.dat' using 1:2 title "ours, 4 in flight" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/store_curves_thr_shm_get_c8.dat' using 1:2 title "ours, 8 in flight" with linespoints lw 2 pt 7 lc rgb '#9467bd', \
     'data/store_curves_thr_shm_get_c16.dat' using 1:2 title "ours, 16 in flight" with linespoints lw 2 pt 7 lc rgb '#ff7f0e', \
     'data/store_curves_thr_shm_get_c32.dat' using 1:2 title "ours, 32 in flight" with linespoints lw 2 pt 7 lc rgb '#17becf', \
     'data/store_curves_thr_shm_get_c64.dat' using 1:2 title "ours, 64 in flight" with linespoints lw 2 pt 7 lc rgb '#8c564b', \
     'data/store_curves_thr_shm_get_c128.dat' using 1:2 title "ours, 128 in flight" with linespoints lw 2 pt 7 lc rgb '#e377c2', \
     'data/store_curves_thr_shm_get_c256.dat' using 1:2 title "ours, 256 in flight" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_curves_thr_shm_get_c1.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 1 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/store_curves_thr_shm_get_c2.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 2 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728', \
     'data/store_curves_thr_shm_get_c4.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 4 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#2ca02c', \
     'data/store_curves_thr_shm_get_c8.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 8 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#9467bd', \
     'data/store_curves_thr_shm_get_c16.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 16 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#ff7f0e', \
     'data/store_curves_thr_shm_get_c32.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 32 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#17becf', \
     'data/store_curves_thr_shm_get_c64.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 64 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#8c564b', \
     'data/store_curves_thr_shm_get_c128.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 128 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#e377c2', \
     'data/store_curves_thr_shm_get_c256.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 256 in flight" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4'
unset multiplot
unset output
