/* first.c: the times of a process's first three stats of PATH1..3 (under `shoal run`: the
 * connection, a stat the daemon answers, and the listing a second miss in a directory asks
 * for).  gcc -O2 -o first first.c; shoal run -- ./first MNT/a MNT/b MNT/c */
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
static double now(){struct timespec ts;clock_gettime(CLOCK_MONOTONIC,&ts);return ts.tv_sec*1e6+ts.tv_nsec/1e3;}
int main(int c,char**v){ struct stat st; double a=now(); stat(v[1],&st); double b=now(); stat(v[2],&st); double d=now(); stat(v[3],&st); double e=now();
printf("first %.0f us, second %.0f us, third %.0f\n", b-a, d-b, e-d); return 0;}
