/* twice.c: lstat every path of LIST (one per line, relative to DIR) once, then REPS times
 * more: the first pass fetches what the library keeps, the others are answered from it.
 *   gcc -O2 -o twice twice.c; shoal run -- ./twice MNT/clone LIST 10 against ./twice XFS/clone LIST 10 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
static double now(){struct timespec ts;clock_gettime(CLOCK_MONOTONIC,&ts);return ts.tv_sec*1e3+ts.tv_nsec/1e6;}
int main(int c,char**v){ if(chdir(v[1])) return 1; FILE*f=fopen(v[2],"r"); char line[4096]; char **paths=malloc(sizeof(char*)*200000); int n=0;
 while(fgets(line,sizeof line,f)){ line[strcspn(line,"\n")]=0; paths[n++]=strdup(line);} struct stat st;
 double a=now(); for(int k=0;k<n;k++) lstat(paths[k],&st); double b=now(); int reps=atoi(v[3]); for(int r=0;r<reps;r++) for(int k=0;k<n;k++) lstat(paths[k],&st); double e=now();
 printf("first pass %.1f ms, cached passes %.0f ns/stat\n", b-a, (e-b)*1e6/n/reps); return 0; }
