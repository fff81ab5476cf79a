# run from plots/: gnuplot data/transfer_throughput_t2.gp
set terminal pngcairo size 1400,1000 font "sans,10" noenhanced
set output 'transfer_throughput_t2.png'
set multiplot layout 2,2 title "transfer: throughput vs request size, 2 initiator threads (ours solid, baseline dashed)" font ",14"
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "tcp read"
set key maxrows 3
set logscale x 2
set xlabel "request size"
set xrange [2925.714285714286:23488102.4]
set ylabel "GB/s"
set yrange [0:*]
set xtics ("4KiB" 4096, "64KiB" 65536, "1MiB" 1048576, "16MiB" 16777216)
plot 'data/transfer_tcp_read_b1_t2.dat' using 1:2 title "ours, batch 1" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/transfer_tcp_read_b16_t2.dat' using 1:2 title "ours, batch 16" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/transfer_tcp_read_b128_t2.dat' using 1:2 title "ours, batch 128" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/transfer_tcp_read_b1_t2.dat' using 1:($3>0?$3:1/0) title "raw TCP pump, batch 1" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/transfer_tcp_read_b16_t2.dat' using 1:($3>0?$3:1/0) title "raw TCP pump, batch 16" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728', \
     'data/transfer_tcp_read_b128_t2.dat' using 1:($3>0?$3:1/0) title "raw TCP pump, batch 128" with linespoints lw 2 dt 2 pt 6 lc rgb '#2ca02c'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "shm read"
set key maxrows 3
set logscale x 2
set xlabel "request size"
set xrange [2925.714285714286:23488102.4]
set ylabel "GB/s"
set yrange [0:*]
set xtics ("4KiB" 4096, "64KiB" 65536, "1MiB" 1048576, "16MiB" 16777216)
plot 'data/transfer_shm_read_b1_t2.dat' using 1:2 title "ours, batch 1" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/transfer_shm_read_b16_t2.dat' using 1:2 title "ours, batch 16" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/transfer_shm_read_b128_t2.dat' using 1:2 title "ours, batch 128" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/transfer_shm_read_b1_t2.dat' using 1:($3>0?$3:1/0) title "memcpy, batch 1" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/transfer_shm_read_b16_t2.dat' using 1:($3>0?$3:1/0) title "memcpy, batch 16" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728', \
     'data/transfer_shm_read_b128_t2.dat' using 1:($3>0?$3:1/0) title "memcpy, batch 128" with linespoints lw 2 dt 2 pt 6 lc rgb '#2ca02c'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "tcp write"
set key maxrows 3
set logscale x 2
set xlabel "request size"
set xrange [2925.714285714286:23488102.4]
set ylabel "GB/s"
set yrange [0:*]
set xtics ("4KiB" 4096, "64KiB" 65536, "1MiB" 1048576, "16MiB" 16777216)
plot 'data/transfer_tcp_write_b1_t2.dat' using 1:2 title "ours, batch 1" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/transfer_tcp_write_b16_t2.dat' using 1:2 title "ours, batch 16" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/transfer_tcp_write_b128_t2.dat' using 1:2 title "ours, batch 128" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/transfer_tcp_write_b1_t2.dat' using 1:($3>0?$3:1/0) title "raw TCP pump, batch 1" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/transfer_tcp_write_b16_t2.dat' using 1:($3>0?$3:1/0) title "raw TCP pump, batch 16" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728', \
     'data/transfer_tcp_write_b128_t2.dat' using 1:($3>0?$3:1/0) title "raw TCP pump, batch 128" with linespoints lw 2 dt 2 pt 6 lc rgb '#2ca02c'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "shm write"
set key maxrows 3
set logscale x 2
set xlabel "request size"
set xrange [2925.714285714286:23488102.4]
set ylabel "GB/s"
set yrange [0:*]
set xtics ("4KiB" 4096, "64KiB" 65536, "1MiB" 1048576, "16MiB" 16777216)
plot 'data/transfer_shm_write_b1_t2.dat' using 1:2 title "ours, batch 1" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/transfer_shm_write_b16_t2.dat' using 1:2 title "ours, batch 16" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/transfer_shm_write_b128_t2.dat' using 1:2 title "ours, batch 128" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/transfer_shm_write_b1_t2.dat' using 1:($3>0?$3:1/0) title "memcpy, batch 1" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/transfer_shm_write_b16_t2.dat' using 1:($3>0?$3:1/0) title "memcpy, batch 16" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728', \
     'data/transfer_shm_write_b128_t2.dat' using 1:($3>0?$3:1/0) title "memcpy, batch 128" with linespoints lw 2 dt 2 pt 6 lc rgb '#2ca02c'
unset multiplot
set terminal svg size 1400,1000 font "sans,10" noenhanced dynamic
set output 'transfer_throughput_t2.svg'
set multiplot layout 2,2 title "transfer: throughput vs request size, 2 initiator threads (ours solid, baseline dashed)" font ",14"
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "tcp read"
set key maxrows 3
set logscale x 2
set xlabel "request size"
set xrange [2925.714285714286:23488102.4]
set ylabel "GB/s"
set yrange [0:*]
set xtics ("4KiB" 4096, "64KiB" 65536, "1MiB" 1048576, "16MiB" 16777216)
plot 'data/transfer_tcp_read_b1_t2.dat' using 1:2 title "ours, batch 1" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/transfer_tcp_read_b16_t2.dat' using 1:2 title "ours, batch 16" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/transfer_tcp_read_b128_t2.dat' using 1:2 title "ours, batch 128" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/transfer_tcp_read_b1_t2.dat' using 1:($3>0?$3:1/0) title "raw TCP pump, batch 1" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/transfer_tcp_read_b16_t2.dat' using 1:($3>0?$3:1/0) title "raw TCP pump, batch 16" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728', \
     'data/transfer_tcp_read_b128_t2.dat' using 1:($3>0?$3:1/0) title "raw TCP pump, batch 128" with linespoints lw 2 dt 2 pt 6 lc rgb '#2ca02c'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "shm read"
set key maxrows 3
set logscale x 2
set xlabel "request size"
set xrange [2925.714285714286:23488102.4]
set ylabel "GB/s"
set yrange [0:*]
set xtics ("4KiB" 4096, "64KiB" 65536, "1MiB" 1048576, "16MiB" 16777216)
plot 'data/transfer_shm_read_b1_t2.dat' using 1:2 title "ours, batch 1" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/transfer_shm_read_b16_t2.dat' using 1:2 title "ours, batch 16" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/transfer_shm_read_b128_t2.dat' using 1:2 title "ours, batch 128" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/transfer_shm_read_b1_t2.dat' using 1:($3>0?$3:1/0) title "memcpy, batch 1" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/transfer_shm_read_b16_t2.dat' using 1:($3>0?$3:1/0) title "memcpy, batch 16" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728', \
     'data/transfer_shm_read_b128_t2.dat' using 1:($3>0?$3:1/0) title "memcpy, batch 128" with linespoints lw 2 dt 2 pt 6 lc rgb '#2ca02c'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "tcp write"
set key maxrows 3
set logscale x 2
set xlabel "request size"
set xrange [2925.714285714286:23488102.4]
set ylabel "GB/s"
set yrange [0:*]
set xtics ("4KiB" 4096, "64KiB" 65536, "1MiB" 1048576, "16MiB" 16777216)
plot 'data/transfer_tcp_write_b1_t2.dat' using 1:2 title "ours, batch 1" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/transfer_tcp_write_b16_t2.dat' using 1:2 title "ours, batch 16" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/transfer_tcp_write_b128_t2.dat' using 1:2 title "ours, batch 128" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/transfer_tcp_write_b1_t2.dat' using 1:($3>0?$3:1/0) title "raw TCP pump, batch 1" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/transfer_tcp_write_b16_t2.dat' using 1:($3>0?$3:1/0) title "raw TCP pump, batch 16" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728', \
     'data/transfer_tcp_write_b128_t2.dat' using 1:($3>0?$3:1/0) title "raw TCP pump, batch 128" with linespoints lw 2 dt 2 pt 6 lc rgb '#2ca02c'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "shm write"
set key maxrows 3
set logscale x 2
set xlabel "request size"
set xrange [2925.714285714286:23488102.4]
set ylabel "GB/s"
set yrange [0:*]
set xtics ("4KiB" 4096, "64KiB" 65536, "1MiB" 1048576, "16MiB" 16777216)
plot 'data/transfer_shm_write_b1_t2.dat' using 1:2 title "ours, batch 1" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/transfer_shm_write_b16_t2.dat' using 1:2 title "ours, batch 16" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/transfer_shm_write_b128_t2.dat' using 1:2 title "ours, batch 128" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/transfer_shm_write_b1_t2.dat' using 1:($3>0?$3:1/0) title "memcpy, batch 1" with linespoints lw 2 dt 2 pt 6 lc rgb '#1f77b4', \
     'data/transfer_shm_write_b16_t2.dat' using 1:($3>0?$3:1/0) title "memcpy, batch 16" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728', \
     'data/transfer_shm_write_b128_t2.dat' using 1:($3>0?$3:1/0) title "memcpy, batch 128" with linespoints lw 2 dt 2 pt 6 lc rgb '#2ca02c'
unset multiplot
unset output
