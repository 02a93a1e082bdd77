"""Opens relative to a dirfd, after fchdir, and after chdir to '..'."""

import os

os.mkdir("d")
fd = os.open("d", os.O_RDONLY | os.O_DIRECTORY)
os.close(os.open("via-dirfd.txt", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd))
os.fchdir(fd)
os.close(os.open("after-fchdir.txt", os.O_WRONLY | os.O_CREAT | os.O_APPEND))
os.chdir("..")
os.close(os.open("./d/../top.txt", os.O_RDWR | os.O_CREAT | os.O_EXCL))
