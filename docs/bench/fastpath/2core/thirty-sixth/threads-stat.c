/* threads-stat.c: N threads each stat PATH once (the first call of a thread: under `shoal run`
 * its connection to the daemon) and then 100 times; the average of each, in µs.
 *   gcc -O2 -pthread -o threads-stat threads-stat.c
 *   shoal run -- ./threads-stat MNT/some/file N    against    ./threads-stat XFS/some/file N */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
static const char *path; static double t[64];
static double now(){struct timespec ts;clock_gettime(CLOCK_MONOTONIC,&ts);return ts.tv_sec*1e6+ts.tv_nsec/1e3;}
static void *run(void *a){ long i=(long)a; struct stat st; double s=now(); stat(path,&st); double m=now(); for(int k=0;k<100;k++) stat(path,&st); t[i]=m-s; t[32+i]=(now()-m)/100; return 0;}
int main(int c,char**v){ path=v[1]; int n=atoi(v[2]); pthread_t th[32]; double s=now();
 for(long i=0;i<n;i++) pthread_create(&th[i],0,run,(void*)i); for(int i=0;i<n;i++) pthread_join(th[i],0);
 double tot=now()-s; double f=0,r=0; for(int i=0;i<n;i++){f+=t[i]; r+=t[32+i];}
 printf("threads %d total %.0f us, first stat avg %.0f us, later stat avg %.2f us\n", n, tot, f/n, r/n); }
