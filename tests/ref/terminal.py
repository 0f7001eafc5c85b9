# terminal.py - a program on a pseudo-terminal, for the tests of what a terminal shows (cli_chat.sh):
# spawn(argv) starts it and gives (pid, fd); read_for(fd, t) is what it writes in t seconds;
# wait_for(fd, token, t) reads until token has arrived or t seconds have passed.
import os
import pty
import select
import time


def spawn(argv):
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(argv[0], argv)
    return pid, fd


def read_for(fd, t):
    out, end = b"", time.time() + t
    while time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.05)
        if r:
            try:
                out += os.read(fd, 65536)
            except OSError:
                break
    return out


def wait_for(fd, token, t=20):
    out, end = b"", time.time() + t
    while time.time() < end and token not in out:
        out += read_for(fd, 0.05)
    return out
