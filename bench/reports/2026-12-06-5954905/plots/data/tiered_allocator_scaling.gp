# run from plots/: gnuplot data/tiered_allocator_scaling.gp
set terminal pngcairo size 900,600 font "sans,10" noenhanced
set output 'tiered_allocator_scaling.png'
set multiplot layout 1,1 title "tiered: OFFSET allocator ns per free+allocate vs live allocations" font ",14"
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set logscale x 2
set logscale y 10
set format x "%.0s%c"
set xlabel "live allocations"
set ylabel "ns/op"
plot 'data/tiered_allocator_scaling.dat' using 1:2 title "ours (OFFSET, two-level segregated fit)" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/tiered_allocator_scaling.dat' using 1:($3>0?$3:1/0) title "std::map/std::set best fit (baseline)" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728'
unset multiplot
set terminal svg size 900,600 font "sans,10" noenhanced dynamic
set output 'tiered_allocator_scaling.svg'
set multiplot layout 1,1 title "tiered: OFFSET allocator ns per free+allocate vs live allocations" font ",14"
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set logscale x 2
set logscale y 10
set format x "%.0s%c"
set xlabel "live allocations"
set ylabel "ns/op"
plot 'data/tiered_allocator_scaling.dat' using 1:2 title "ours (OFFSET, two-level segregated fit)" with linespoints lw 2 pt 7 lc rgb '#1f77b4', \
     'data/tiered_allocator_scaling.dat' using 1:($3>0?$3:1/0) title "std::map/std::set best fit (baseline)" with linespoints lw 2 dt 2 pt 6 lc rgb '#d62728'
unset multiplot
unset output
