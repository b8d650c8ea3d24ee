"""Drives `quiverdb sql` on a pseudo-terminal, as a person at a keyboard.

Usage: shell_pty.py BINARY ADDRESS USER PASSWORD HOME

Two sessions, each on a fresh terminal (HOME set to HOME, so the history
goes there):
  1. types `DELETE FROM z` (no ';'), then Ctrl-D at the continuation
     prompt: the shell must leave without running it;
  2. runs a statement that would take hours, presses Ctrl-C, then runs
     `SELECT 42 AS answer;` and leaves with `\\q`.
Prints what each session showed, between markers, for the Rust test to
check; exits non-zero if a session hangs.
"""

import fcntl
import os
import pty
import select
import subprocess
import sys
import termios
import time

binary, address, user, password, home = sys.argv[1:6]


def controlling_terminal():
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    def __init__(self):
        self.master, slave = pty.openpty()
        env = dict(os.environ, HOME=home, TERM="xterm", NO_COLOR="1")
        self.process = subprocess.Popen(
            [binary, "sql", "--connect", address, "--user", user, "--password", password],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            close_fds=True,
            # The terminal is the shell's controlling terminal, as at a
            # keyboard: Ctrl-C then sends SIGINT.
            preexec_fn=controlling_terminal,
        )
        os.close(slave)
        self.seen = b""

    def read_until(self, text, timeout=30):
        deadline = time.time() + timeout
        while text.encode() not in self.seen:
            left = deadline - time.time()
            if left <= 0:
                raise TimeoutError(f"waited for {text!r}; the terminal shows {self.seen!r}")
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.master, 4096)
                except OSError:
                    chunk = b""
                if not chunk:
                    if text.encode() not in self.seen:
                        raise EOFError(f"the shell ended before {text!r}; it showed {self.seen!r}")
                    return
                self.seen += chunk

    def type(self, keys):
        os.write(self.master, keys.encode())

    def finish(self, timeout=30):
        deadline = time.time() + timeout
        while self.process.poll() is None:
            if time.time() > deadline:
                self.process.kill()
                raise TimeoutError(f"the shell did not exit; it showed {self.seen!r}")
            ready, _, _ = select.select([self.master], [], [], 0.1)
            if ready:
                try:
                    self.seen += os.read(self.master, 4096)
                except OSError:
                    pass
        return self.process.returncode


# 1. Ctrl-D at a continuation prompt discards the unfinished statement.
t = Terminal()
t.read_until("quiverdb> ")
t.type("DELETE FROM z\r")
t.read_until("-> ")
t.type("\x04")
code = t.finish()
print("=== ctrl-d exit", code)
print(t.seen.decode(errors="replace"))

# 2. Ctrl-C cancels the running statement; the shell goes on.
t = Terminal()
t.read_until("quiverdb> ")
t.type("SELECT COUNT(*) FROM generate_series(1, 100000000000) WHERE value < 0;\r")
time.sleep(1.5)
started = time.time()
t.type("\x03")
t.read_until("cancelled")
print("=== cancelled after", round(time.time() - started, 2))
t.type("SELECT 42 AS answer;\r")
t.read_until("| 42")
t.type("\\q\r")
code = t.finish()
print("=== ctrl-c exit", code)
print(t.seen.decode(errors="replace"))
