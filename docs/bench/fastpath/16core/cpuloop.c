// cpuloop: ns per iteration of a dependent integer hash (no memory traffic): raw CPU speed.
#include <stdio.h>
#include <stdint.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
int main(void){
  uint64_t x=1; long n=200000000; double t=now();
  for(long i=0;i<n;i++){x^=x<<13;x^=x>>7;x^=x<<17;}
  printf("cpuloop %.3f ns/iter (x=%lu)\n",(now()-t)/n,(unsigned long)(x&1));
  return 0;
}
