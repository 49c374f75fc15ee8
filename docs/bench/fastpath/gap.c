/* gap DIR N GAP_US: N fgetxattr round trips, each after GAP_US of busy work; mean µs per call (excluding the gap) */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/xattr.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
int main(int c,char**v){ char p[4096]; snprintf(p,sizeof p,"%s/f",v[1]); int fd=open(p,O_RDWR|O_CREAT,0644); int n=atoi(v[2]); double g=atof(v[3]);
 double tot=0; for(int i=0;i<n;i++){ double a=now(); while(now()-a<g); double b=now(); fgetxattr(fd,"user.none",NULL,0); tot+=now()-b; }
 printf("gap %g us: %.2f us/call\n",g,tot/n);}
