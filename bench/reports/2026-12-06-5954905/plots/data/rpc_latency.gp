# run from plots/: gnuplot data/rpc_latency.gp
set terminal pngcairo size 1500,600 font "sans,10" noenhanced
set output 'rpc_latency.png'
set multiplot layout 1,3 title "rpc: 64-byte calls vs calls in flight" font ",14"
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "p50 latency"
set ylabel "us"
set key maxrows 2
set logscale x 2
set xlabel "calls in flight"
set xtics ("1" 1, "4" 4, "16" 16, "64" 64, "256" 256)
set xrange [0.7692307692307692:332.8]
set logscale y 10
plot 'data/rpc_call_64B.dat' using 1:2 title "ours (mc::rpc, coroutine method)" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/rpc_call_64B_plain_method.dat' using 1:2 title "ours (plain KJ method)" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/rpc_pingpong_64B_asio_floor.dat' using 1:2 title "raw asio ping-pong (floor)" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/rpc_call_64B.dat' using 1:($5>0?$5:1/0) title "capnp kj loop (baseline)" with linespoints lw 2 dt 2 pt 6 lc rgb '#ff7f0e'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "p99 latency"
set ylabel "us"
set key maxrows 2
set logscale x 2
set xlabel "calls in flight"
set xtics ("1" 1, "4" 4, "16" 16, "64" 64, "256" 256)
set xrange [0.7692307692307692:332.8]
set logscale y 10
plot 'data/rpc_call_64B.dat' using 1:3 title "ours (mc::rpc, coroutine method)" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/rpc_call_64B_plain_method.dat' using 1:3 title "ours (plain KJ method)" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/rpc_pingpong_64B_asio_floor.dat' using 1:3 title "raw asio ping-pong (floor)" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/rpc_call_64B.dat' using 1:($6>0?$6:1/0) title "capnp kj loop (baseline)" with linespoints lw 2 dt 2 pt 6 lc rgb '#ff7f0e'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "throughput"
set ylabel "calls/s"
set key maxrows 2
set logscale x 2
set xlabel "calls in flight"
set xtics ("1" 1, "4" 4, "16" 16, "64" 64, "256" 256)
set xrange [0.7692307692307692:332.8]
set yrange [0:*]
plot 'data/rpc_call_64B.dat' using 1:4 title "ours (mc::rpc, coroutine method)" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/rpc_call_64B_plain_method.dat' using 1:4 title "ours (plain KJ method)" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/rpc_pingpong_64B_asio_floor.dat' using 1:4 title "raw asio ping-pong (floor)" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/rpc_call_64B.dat' using 1:($7>0?$7:1/0) title "capnp kj loop (baseline)" with linespoints lw 2 dt 2 pt 6 lc rgb '#ff7f0e'
unset multiplot
set terminal svg size 1500,600 font "sans,10" noenhanced dynamic
set output 'rpc_latency.svg'
set multiplot layout 1,3 title "rpc: 64-byte calls vs calls in flight" font ",14"
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "p50 latency"
set ylabel "us"
set key maxrows 2
set logscale x 2
set xlabel "calls in flight"
set xtics ("1" 1, "4" 4, "16" 16, "64" 64, "256" 256)
set xrange [0.7692307692307692:332.8]
set logscale y 10
plot 'data/rpc_call_64B.dat' using 1:2 title "ours (mc::rpc, coroutine method)" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/rpc_call_64B_plain_method.dat' using 1:2 title "ours (plain KJ method)" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/rpc_pingpong_64B_asio_floor.dat' using 1:2 title "raw asio ping-pong (floor)" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/rpc_call_64B.dat' using 1:($5>0?$5:1/0) title "capnp kj loop (baseline)" with linespoints lw 2 dt 2 pt 6 lc rgb '#ff7f0e'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "p99 latency"
set ylabel "us"
set key maxrows 2
set logscale x 2
set xlabel "calls in flight"
set xtics ("1" 1, "4" 4, "16" 16, "64" 64, "256" 256)
set xrange [0.7692307692307692:332.8]
set logscale y 10
plot 'data/rpc_call_64B.dat' using 1:3 title "ours (mc::rpc, coroutine method)" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/rpc_call_64B_plain_method.dat' using 1:3 title "ours (plain KJ method)" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/rpc_pingpong_64B_asio_floor.dat' using 1:3 title "raw asio ping-pong (floor)" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/rpc_call_64B.dat' using 1:($6>0?$6:1/0) title "capnp kj loop (baseline)" with linespoints lw 2 dt 2 pt 6 lc rgb '#ff7f0e'
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set title "throughput"
set ylabel "calls/s"
set key maxrows 2
set logscale x 2
set xlabel "calls in flight"
set xtics ("1" 1, "4" 4, "16" 16, "64" 64, "256" 256)
set xrange [0.7692307692307692:332.8]
set yrange [0:*]
plot 'data/rpc_call_64B.dat' using 1:4 title "ours (mc::rpc, coroutine method)" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/rpc_call_64B_plain_method.dat' using 1:4 title "ours (plain KJ method)" with linespoints lw 2 pt 7 lc rgb '#d62728', \
     'data/rpc_pingpong_64B_asio_floor.dat' using 1:4 title "raw asio ping-pong (floor)" with linespoints lw 2 pt 7 lc rgb '#2ca02c', \
     'data/rpc_call_64B.dat' using 1:($7>0?$7:1/0) title "capnp kj loop (baseline)" with linespoints lw 2 dt 2 pt 6 lc rgb '#ff7f0e'
unset multiplot
unset output
