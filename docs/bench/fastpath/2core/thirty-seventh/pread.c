/* pread.c: T threads open, read whole and close the files of LIST (relative to DIR), each
 * a contiguous chunk: what `git status` does for each racily clean entry of its index
 * (from its main thread), `cp -a` and `tar c` for every file.
 *   gcc -O2 -pthread -o pread pread.c
 *   pread DIR LIST T [EVERY] -> ms (every EVERY-th path of LIST only) */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static char **paths; static int n, t;
static double now(){struct timespec ts;clock_gettime(CLOCK_MONOTONIC,&ts);return ts.tv_sec*1e3+ts.tv_nsec/1e6;}
static void *run(void *a){ long i=(long)a; int per=(n+t-1)/t; int s=i*per, e=s+per; if(e>n)e=n; char buf[65536]; long bad=0;
 for(int k=s;k<e;k++){ int fd=open(paths[k],O_RDONLY); if(fd<0){bad++;continue;} while(read(fd,buf,sizeof buf)>0); close(fd);} return (void*)bad; }
int main(int c,char**v){ if(chdir(v[1])) return 1; FILE*f=fopen(v[2],"r"); t=atoi(v[3]); int every=c>4?atoi(v[4]):1; char line[4096]; paths=malloc(sizeof(char*)*200000); int k=0;
 while(fgets(line,sizeof line,f)){ line[strcspn(line,"\n")]=0; if(k++%every==0) paths[n++]=strdup(line);} 
 double s=now(); pthread_t th[64]; long bad=0; for(long i=0;i<t;i++) pthread_create(&th[i],0,run,(void*)i);
 for(int i=0;i<t;i++){ void*r; pthread_join(th[i],&r); bad+=(long)r;} printf("%d threads: %.1f ms (%d files, %ld failed)\n", t, now()-s, n, bad); return 0; }
