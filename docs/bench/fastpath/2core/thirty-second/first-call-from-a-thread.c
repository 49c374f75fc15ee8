/* first-call-from-a-thread.c: N threads each lstat PATH K times; the first call of a thread under the library made its connection (gcc -O2 -pthread; ./a.out PATH N K) */
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
static const char *path; static int per;
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e3+t.tv_nsec/1e6;}
static void *run(void *a){struct stat st; for(int i=0;i<per;i++) lstat(path,&st); return 0;}
int main(int c,char**v){path=v[1];int n=atoi(v[2]);per=atoi(v[3]);pthread_t t[64];double s=now();
for(int i=0;i<n;i++)pthread_create(&t[i],0,run,0);for(int i=0;i<n;i++)pthread_join(t[i],0);
printf("%d threads x %d lstat: %.2f ms\n",n,per,now()-s);}
