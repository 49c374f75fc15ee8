/* calls DIR N CALL: N calls of one kind on DIR/f (made if missing), the mean time of one.
 * CALL: getxattr (of a name the file lacks), utimens, fchmod, pwrite (1 byte), stat, fstat.
 * Under the preload library each of the first four is one round trip to the daemon. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: calls DIR N getxattr|utimens|fchmod|pwrite|stat|fstat\n");
        return 2;
    }
    int n = atoi(argv[2]);
    const char *call = argv[3];
    char path[4096];
    snprintf(path, sizeof path, "%s/f", argv[1]);
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    if (fd < 0) {
        perror(path);
        return 1;
    }
    struct stat st;
    double start = now_ns();
    for (int i = 0; i < n; i++) {
        if (!strcmp(call, "getxattr")) fgetxattr(fd, "user.none", NULL, 0);
        else if (!strcmp(call, "utimens")) futimens(fd, NULL);
        else if (!strcmp(call, "fchmod")) fchmod(fd, (i & 1) ? 0755 : 0644);
        else if (!strcmp(call, "pwrite")) pwrite(fd, "x", 1, 0);
        else if (!strcmp(call, "stat")) stat(path, &st);
        else if (!strcmp(call, "fstat")) fstat(fd, &st);
        else {
            fprintf(stderr, "unknown call %s\n", call);
            return 2;
        }
    }
    printf("%s %.2f us/call\n", call, (now_ns() - start) / n / 1000);
    return 0;
}
