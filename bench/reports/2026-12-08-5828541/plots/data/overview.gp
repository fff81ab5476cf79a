# run from plots/: gnuplot data/overview.gp
set terminal pngcairo size 1200,1324 font "sans,10" noenhanced
set output 'overview.png'
set multiplot layout 1,1 title "throughput ratio ours / baseline (> 1: ours faster; grey: noisy or < 3 runs)" font ",14"
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set logscale x 10
set xrange [0.20876507358594068:300.1240850915052]
set xtics ("0.5" 0.5, "1" 1, "2" 2, "5" 5, "10" 10, "20" 20, "50" 50, "100" 100)
set yrange [74:-1]
set key off
set ytics scale 0 font ",8"
unset grid
set grid xtics
set xlabel "ours / baseline (throughput)"
set arrow from 1, graph 0 to 1, graph 1 nohead lc rgb 'black'
set style fill solid 0.8
set lmargin 44
plot 'data/overview.dat' using (sqrt($2)):1:($2<1?$2:1):($2<1?1:$2):($1-0.38):($1+0.38):($3>0?0x999999:($2>=1?0x2ca02c:0xd62728)):yticlabels(4) title "" with boxxyerror lc rgb variable
unset multiplot
set terminal svg size 1200,1324 font "sans,10" noenhanced dynamic
set output 'overview.svg'
set multiplot layout 1,1 title "throughput ratio ours / baseline (> 1: ours faster; grey: noisy or < 3 runs)" font ",14"
reset
set grid
set key below font ",9" maxrows 3 samplen 3
set tics font ",9"
set logscale x 10
set xrange [0.20876507358594068:300.1240850915052]
set xtics ("0.5" 0.5, "1" 1, "2" 2, "5" 5, "10" 10, "20" 20, "50" 50, "100" 100)
set yrange [74:-1]
set key off
set ytics scale 0 font ",8"
unset grid
set grid xtics
set xlabel "ours / baseline (throughput)"
set arrow from 1, graph 0 to 1, graph 1 nohead lc rgb 'black'
set style fill solid 0.8
set lmargin 44
plot 'data/overview.dat' using (sqrt($2)):1:($2<1?$2:1):($2<1?1:$2):($1-0.38):($1+0.38):($3>0?0x999999:($2>=1?0x2ca02c:0xd62728)):yticlabels(4) title "" with boxxyerror lc rgb variable
unset multiplot
unset output
