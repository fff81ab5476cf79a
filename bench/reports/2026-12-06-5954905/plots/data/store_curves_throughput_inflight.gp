# run from plots/: gnuplot data/store_curves_throughput_inflight.gp
set terminal pngcairo size 1400,1000 font "sans,10" noenhanced
set output 'store_curves_throughput_inflight.png'
set multiplot layout 1,2 title "store: remote get/put ops/s vs requests in flight (ours solid, Redis dashed)" font ",14"
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "tcp get"
set logscale x 2
set logscale y 10
set xlabel "requests in flight"
set ylabel "ops/s"
set xtics ("1" 1, "2" 2, "4" 4, "8" 8, "16" 16, "32" 32, "64" 64, "128" 128, "256" 256)
set xrange [0.7692307692307692:332.8]
plot 'data/store_curves_ops_tcp_get_4KiB.dat' using 1:2 title "ours, 4KiB" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_curves_ops_tcp_get_4KiB.dat' using 1:($3>0?$3:1/0) title "redis tcp, 4KiB" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "shm get"
set logscale x 2
set logscale y 10
set xlabel "requests in flight"
set ylabel "ops/s"
set xtics ("1" 1, "2" 2, "4" 4, "8" 8, "16" 16, "32" 32, "64" 64, "128" 128, "256" 256)
set xrange [0.7692307692307692:332.8]
plot 'data/store_curves_ops_shm_get_4KiB.dat' using 1:2 title "ours, 4KiB" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_curves_ops_shm_get_4KiB.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 4KiB" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4'
unset multiplot
set terminal svg size 1400,1000 font "sans,10" noenhanced dynamic
set output 'store_curves_throughput_inflight.svg'
set multiplot layout 1,2 title "store: remote get/put ops/s vs requests in flight (ours solid, Redis dashed)" font ",14"
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "tcp get"
set logscale x 2
set logscale y 10
set xlabel "requests in flight"
set ylabel "ops/s"
set xtics ("1" 1, "2" 2, "4" 4, "8" 8, "16" 16, "32" 32, "64" 64, "128" 128, "256" 256)
set xrange [0.7692307692307692:332.8]
plot 'data/store_curves_ops_tcp_get_4KiB.dat' using 1:2 title "ours, 4KiB" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_curves_ops_tcp_get_4KiB.dat' using 1:($3>0?$3:1/0) title "redis tcp, 4KiB" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "shm get"
set logscale x 2
set logscale y 10
set xlabel "requests in flight"
set ylabel "ops/s"
set xtics ("1" 1, "2" 2, "4" 4, "8" 8, "16" 16, "32" 32, "64" 64, "128" 128, "256" 256)
set xrange [0.7692307692307692:332.8]
plot 'data/store_curves_ops_shm_get_4KiB.dat' using 1:2 title "ours, 4KiB" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/store_curves_ops_shm_get_4KiB.dat' using 1:($3>0?$3:1/0) title "redis unix socket, 4KiB" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4'
unset multiplot
unset output
