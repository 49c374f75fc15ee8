/* gwalk.c: git status's search for untracked files in miniature: from DIR, per directory
 * (named by its path with a trailing slash, as git does): opendir, fstat, the first entry,
 * open "<dir>.gitignore" (ENOENT), the other entries, recursing into subdirectories while
 * the parent is open, closedir. Prints the time, this process's CPU, directories, entries.
 *   gcc -O2 -o gwalk gwalk.c;  shoal run -- ./gwalk MNT/clone  against  ./gwalk XFS/clone */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>
static long dirs, entries;
static double now(){struct timespec ts;clock_gettime(CLOCK_MONOTONIC,&ts);return ts.tv_sec*1e3+ts.tv_nsec/1e6;}
static void walk(const char *path) {
    char buf[4096];
    DIR *d = opendir(*path ? path : ".");
    if (!d) return;
    struct stat st; fstat(dirfd(d), &st);
    dirs++;
    struct dirent *e = readdir(d);
    snprintf(buf, sizeof buf, "%s.gitignore", path);
    int fd = open(buf, O_RDONLY | O_NOFOLLOW);
    if (fd >= 0) close(fd);
    for (; e; e = readdir(d)) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, ".git")) continue;
        entries++;
        if (e->d_type == DT_DIR) {
            char sub[4096];
            snprintf(sub, sizeof sub, "%s%s/", path, e->d_name);
            walk(sub);
        }
    }
    closedir(d);
}
int main(int c, char **v) {
    if (chdir(v[1])) return 1;
    struct rusage r0, r1; getrusage(RUSAGE_SELF, &r0);
    double s = now(); walk(""); double e = now();
    getrusage(RUSAGE_SELF, &r1);
    double cpu = (r1.ru_utime.tv_sec - r0.ru_utime.tv_sec + r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) * 1e3 + (r1.ru_utime.tv_usec - r0.ru_utime.tv_usec + r1.ru_stime.tv_usec - r0.ru_stime.tv_usec) / 1e3;
    printf("%.1f ms (cpu %.1f ms), %ld dirs, %ld entries\n", e - s, cpu, dirs, entries);
    return 0;
}
