/* plstat2.c: git's preload_index in miniature: T threads lstat the paths of LIST (one per
 * line, relative to DIR; `git ls-files` of a clone), each a contiguous chunk as git 2.39
 * splits its index. Each thread first stats "." (under `shoal run`: its connection) and
 * waits at a barrier; prints that setup's time and the lstats'.
 *   gcc -O2 -pthread -o plstat2 plstat2.c
 *   shoal run -- ./plstat2 MNT/clone LIST T    against    ./plstat2 XFS/clone LIST T */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
static char **paths; static int n, t; static pthread_barrier_t bar; static double t0, t1;
static double now(){struct timespec ts;clock_gettime(CLOCK_MONOTONIC,&ts);return ts.tv_sec*1e3+ts.tv_nsec/1e6;}
static void *run(void *a){ long i=(long)a; int per=(n+t-1)/t; int s=i*per, e=s+per; if(e>n)e=n; struct stat st; int bad=0;
 stat(".",&st); pthread_barrier_wait(&bar); if(i==0) t1=now();
 for(int k=s;k<e;k++) if(lstat(paths[k],&st)) bad++; return (void*)(long)bad; }
int main(int c,char**v){ if(chdir(v[1])) return 1; FILE*f=fopen(v[2],"r"); t=atoi(v[3]); char line[4096]; paths=malloc(sizeof(char*)*200000);
 while(fgets(line,sizeof line,f)){ line[strcspn(line,"\n")]=0; paths[n++]=strdup(line);} pthread_barrier_init(&bar,0,t);
 t0=now(); pthread_t th[64]; long bad=0; for(long i=0;i<t;i++) pthread_create(&th[i],0,run,(void*)i);
 for(int i=0;i<t;i++){ void*r; pthread_join(th[i],&r); bad+=(long)r;} double e=now(); printf("%d threads: setup %.1f ms, main %.1f ms (%ld failed)\n", t, t1-t0, e-t1, bad); return 0; }
