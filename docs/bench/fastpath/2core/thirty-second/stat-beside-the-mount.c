/* stat-beside-the-mount.c: ns per stat() of an absolute path and per fstatat() relative to a directory descriptor, for paths on another filesystem (the library's overhead there); ./a.out ABS_PATH N DIR NAME */
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
int main(int c,char**v){int n=atoi(v[2]);struct stat st;double t=now();for(int i=0;i<n;i++)stat(v[1],&st);double a=(now()-t)/n;
int d=open(v[3],O_RDONLY|O_DIRECTORY);t=now();for(int i=0;i<n;i++)fstatat(d,v[4],&st,AT_SYMLINK_NOFOLLOW);printf("stat(abs) %.0f ns, fstatat(dirfd) %.0f ns\n",a,(now()-t)/n);}
