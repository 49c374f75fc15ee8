// ocr LIST SPIN_US: opens, reads (64 KiB) and closes each file named in LIST, busy-waiting
// SPIN_US between files (git hashing a racily clean entry); open and read latency percentiles.
// gcc -O2 -o ocr ocr.c; run in the tree, under `shoal run --` or not.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int c,char**v){FILE*f=fopen(v[1],"r");double spin=atof(v[2]);char line[4096];static char buf[65536];
 double *lat=malloc(sizeof(double)*200000), *rl=malloc(sizeof(double)*200000);int n=0;double t0=now();
 while(fgets(line,sizeof line,f)){line[strcspn(line,"\n")]=0;double a=now();int fd=open(line,O_RDONLY);double b=now();
  if(fd<0){perror(line);continue;} read(fd,buf,sizeof buf); double r=now(); close(fd); lat[n]=b-a; rl[n]=r-b; n++; double e=now()+spin; while(now()<e);}
 double tot=now()-t0; qsort(lat,n,sizeof(double),cmp);qsort(rl,n,sizeof(double),cmp);
 printf("n=%d total %.0f ms open p50 %.1f p90 %.1f p99 %.1f us; read p50 %.1f p90 %.1f\n",n,tot/1000,lat[n/2],lat[n*9/10],lat[n*99/100],rl[n/2],rl[n*9/10]);}
