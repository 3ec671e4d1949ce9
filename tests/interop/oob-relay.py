#!/usr/bin/python3
"""oob-relay.py - the out-of-band TCP path of the interop matrix's lib_ rows (matrix.sh).

In the lib_ rows the same Debian tools run on both sides: in the VM on rxe, and on the host on uroce's
libibverbs.so.1 (`uroce run`). Their RoCE traffic goes over the VM's eth0 link, but their out-of-band TCP
exchange (QP numbers, PSNs, GIDs, perftest's parameters) uses the kernel's TCP, which reaches the VM only
through QEMU's user network (eth1, `-netdev user,restrict=on`, guest 10.0.2.15) and its explicit forwards.
This relay joins a TCP client to a server across such a forward, both ways:

  oob-relay.py [--log FILE] [--secs N] --to HOST:PORT
      relays its stdin/stdout (one socket: QEMU's `guestfwd=tcp:10.0.2.100:P-cmd:oob-relay.py --to ...`
      runs it for each connection a VM client opens) to HOST:PORT;
  oob-relay.py [--log FILE] [--secs N] --listen PORT=TARGET [--listen ...]
      listens on 127.0.0.1:PORT and relays every connection to 127.0.0.1:TARGET (a host client reaching a
      VM server through `hostfwd=tcp:127.0.0.1:TARGET-:PORT`).

A forward accepts a connection at once, whether or not anything listens behind it: QEMU's hostfwd accepts on
the host and only then tries the guest, closing the connection when the guest refuses. So the relay connects
again (0.1 s apart, for at most --secs seconds, default 30) while the target refuses, and also when the target
closes before it has sent a single byte, in which case it sends again what the client had sent. Both tools'
exchanges start with the client's message and the server's answer, so a connection that ends before any
answer never reached a server. After the first answer it is a plain relay (half-closes passed on).
It never writes to its stdout or stderr (in `--to` mode they are the client's connection): --log.
"""
import os
import select
import socket
import sys
import threading
import time

LOG = None
LOCK = threading.Lock()


def log(msg):
    if LOG is not None:
        with LOCK:
            LOG.write("%.3f %d %s\n" % (time.time(), os.getpid(), msg))
            LOG.flush()


def connect(target, deadline):
    """A connection to target, tried 0.1 s apart until the deadline (None when it never came)."""
    tries = 0
    while True:
        tries += 1
        try:
            s = socket.create_connection(target, timeout=2)
            s.settimeout(None)
            return s, tries
        except OSError:
            if time.monotonic() >= deadline:
                return None, tries
            time.sleep(0.1)


def relay(c, target, secs, name):
    deadline = time.monotonic() + secs
    s, tries = connect(target, deadline)
    if s is None:
        log("%s: %s:%d never accepted (%d tries)" % (name, target[0], target[1], tries))
        c.close()
        return
    log("%s: connected to %s:%d (%d tries)" % (name, target[0], target[1], tries))
    sent = bytearray()  # what the client sent before the server's first byte: sent again on a new connection
    answered = False
    c_eof = s_eof = False
    up = down = replays = 0
    while not (c_eof and s_eof):
        rd = [x for x, eof in ((c, c_eof), (s, s_eof)) if not eof]
        ready, _, _ = select.select(rd, [], [], 1.0)
        if not ready and not answered and time.monotonic() >= deadline:
            log("%s: no answer within %d s" % (name, secs))
            break
        if c in ready:
            try:
                data = c.recv(65536)
            except OSError:
                data = b""
            if data:
                if not answered:
                    sent += data
                try:
                    s.sendall(data)
                except OSError:
                    pass  # the server side ended: seen as its EOF below
                up += len(data)
            else:
                c_eof = True
                try:
                    s.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
        if s in ready:
            try:
                data = s.recv(65536)
            except OSError:
                data = b""
            if data:
                answered = True
                sent = bytearray()
                try:
                    c.sendall(data)
                except OSError:
                    c_eof = True  # the client went away; keep draining the server until its EOF
                down += len(data)
            elif not answered:
                # ended before any answer: nothing listened behind the forward yet; again
                s.close()
                replays += 1
                time.sleep(0.1)
                s, more = connect(target, deadline)
                if s is None:
                    log("%s: gave up after %d connections without an answer" % (name, replays))
                    break
                if sent:
                    s.sendall(sent)
                if c_eof:
                    s.shutdown(socket.SHUT_WR)
            else:
                s_eof = True
                try:
                    c.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
    log("%s: closed (%d bytes up, %d down, %d early closes)" % (name, up, down, replays))
    for x in (s, c):
        if x is not None:
            x.close()


def main():
    global LOG
    args = sys.argv[1:]
    to = None
    listens = []
    secs = 30
    while args:
        a = args.pop(0)
        if a == "--to" and args:
            h, p = args.pop(0).rsplit(":", 1)
            to = (h, int(p))
        elif a == "--listen" and args:
            p, t = args.pop(0).split("=")
            listens.append((int(p), int(t)))
        elif a == "--secs" and args:
            secs = int(args.pop(0))
        elif a == "--log" and args:
            LOG = open(args.pop(0), "a")
        else:
            sys.exit(2)
    if to is not None:
        # QEMU made our stdin, stdout and stderr one socket: the guest's connection
        c = socket.socket(fileno=os.dup(0))
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        relay(c, to, secs, "guest")
        return
    if not listens:
        sys.exit(2)
    socks = {}
    for p, t in listens:
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", p))
        ls.listen(8)
        socks[ls] = t
    log("listening: %s" % " ".join("%d->%d" % pt for pt in listens))
    while True:
        ready, _, _ = select.select(list(socks), [], [])
        for ls in ready:
            c, _ = ls.accept()
            t = socks[ls]
            name = "%d->%d" % (ls.getsockname()[1], t)
            threading.Thread(target=relay, args=(c, ("127.0.0.1", t), secs, name), daemon=True).start()


if __name__ == "__main__":
    main()
