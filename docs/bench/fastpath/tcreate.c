// tcreate DIR THREADS FILES SIZE: each thread creates FILES files of SIZE bytes in DIR/tN
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>
#include <time.h>
static char *dir; static int files, size;
static void *work(void *arg) {
  long t = (long)arg; char path[4096], buf[4096]; memset(buf, 's', sizeof buf);
  snprintf(path, sizeof path, "%s/t%ld", dir, t); mkdir(path, 0777);
  for (int i = 0; i < files; i++) {
    snprintf(path, sizeof path, "%s/t%ld/f%08d", dir, t, i);
    int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0666);
    if (fd < 0) { perror("open"); exit(1); }
    if (write(fd, buf, size) != size) { perror("write"); exit(1); }
    close(fd);
  }
  return 0;
}
int main(int argc, char **argv) {
  dir = argv[1]; int threads = atoi(argv[2]); files = atoi(argv[3]); size = atoi(argv[4]);
  pthread_t th[64]; struct timespec a, b; clock_gettime(CLOCK_MONOTONIC, &a);
  for (long t = 0; t < threads; t++) pthread_create(&th[t], 0, work, (void *)t);
  for (int t = 0; t < threads; t++) pthread_join(th[t], 0);
  clock_gettime(CLOCK_MONOTONIC, &b);
  double s = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
  printf("%d threads: %.0f files/s\n", threads, threads * files / s);
  return 0;
}
