import os, sys
d = sys.argv[1]; n = int(sys.argv[2])
os.mkdir(d)
data = b"x" * 100
for i in range(n):
    fd = os.open(os.path.join(d, "f%d" % i), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, data)
    os.close(fd)
