#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec*1e6+t.tv_nsec/1e3;}
int main(int c, char**v){ const char*d=v[1]; int n=atoi(v[2]); char p[512]; double a,b;
 a=now(); for(int i=0;i<n;i++) mkdir(d,0755); b=now(); printf("mkdir-eexist %.2f us\n",(b-a)/n);
 snprintf(p,sizeof p,"%s/x",d); int fd=open(p,O_CREAT|O_WRONLY,0644); close(fd);
 a=now(); for(int i=0;i<n;i++){ struct stat st; stat(p,&st);} b=now(); printf("stat %.2f us\n",(b-a)/n);
 a=now(); for(int i=0;i<n;i++){ int f=open(p,O_RDONLY); close(f);} b=now(); printf("open+close %.2f us\n",(b-a)/n);
 a=now(); for(int i=0;i<n;i++){ snprintf(p,sizeof p,"%s/f%d",d,i); int f=open(p,O_CREAT|O_EXCL|O_WRONLY,0644); write(f,"0123456789",10); close(f);} b=now(); printf("create+write+close %.2f us\n",(b-a)/n);
 return 0;}
