// pagetouch MB PASSES: ns per 4 KiB page to first-touch fresh anonymous memory, per pass
// (each pass maps, touches and unmaps MB megabytes), then once more re-touching memory
// that stays mapped (no faults): what a page fault costs on this machine.
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
int main(int argc,char**argv){
  size_t mb=argc>1?atol(argv[1]):1024; int passes=argc>2?atoi(argv[2]):3;
  size_t len=mb<<20, pages=len/4096;
  for(int p=0;p<passes;p++){
    char*m=mmap(0,len,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
    if(m==MAP_FAILED){perror("mmap");return 1;}
    double t=now(); for(size_t i=0;i<len;i+=4096)m[i]=1; double e=now()-t;
    double t2=now(); for(size_t i=0;i<len;i+=4096)m[i]++; double e2=now()-t2;
    printf("pass %d: first touch %.0f ns/page, touched again %.1f ns/page\n",p,e/pages,e2/pages);
    munmap(m,len);
  }
  return 0;
}
