// futex-wake.c: what a FUTEX_WAKE of a sleeping thread costs the waker, by where the sleeper's CPU
// is. Build: cc -O2 -pthread futex-wake.c -o futex-wake. Run: ./futex-wake GAP_US SLEEPER_CPU
// (the waker runs on CPU 0; GAP_US between wake-ups lets the sleeper's CPU go idle and halt).
// 2-core VM, Intel host, Nov 28: ./futex-wake 50 1: median 12150 ns, p90 15155 (a halted vCPU);
// ./futex-wake 50 0: median 2483 ns (the waker's own CPU); with a busy loop on CPU 1, 2548 ns.
#define _GNU_SOURCE
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <stdint.h>
#include <pthread.h>
#include <sched.h>
static uint64_t now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1000000000ull+t.tv_nsec;}
static volatile int f=0; static volatile int done=0;
static void* sleeper(void*a){ int c=(long)a; cpu_set_t s; CPU_ZERO(&s); CPU_SET(c,&s); sched_setaffinity(0,sizeof s,&s); while(!done){ int v=f; syscall(SYS_futex,&f,FUTEX_WAIT,v,0,0,0);} return 0;}
int cmp(const void*a,const void*b){uint64_t x=*(uint64_t*)a,y=*(uint64_t*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){ int gap=atoi(argv[1]); int sc=atoi(argv[2]); cpu_set_t s; CPU_ZERO(&s); CPU_SET(0,&s); sched_setaffinity(0,sizeof s,&s); pthread_t t; pthread_create(&t,0,sleeper,(void*)(long)sc);
 uint64_t d[2000]; for(int i=0;i<2000;i++){ uint64_t s=now(); while(now()-s<gap*1000ull); __sync_fetch_and_add(&f,1); s=now(); syscall(SYS_futex,&f,FUTEX_WAKE,1,0,0,0); d[i]=now()-s; if(sc==0) sched_yield(); }
 qsort(d,2000,8,cmp); printf("gap %d us sleeper cpu %d: wake median %lu ns p90 %lu\n",gap,sc,d[1000],d[1800]); done=1; f++; syscall(SYS_futex,&f,FUTEX_WAKE,1,0,0,0); }
