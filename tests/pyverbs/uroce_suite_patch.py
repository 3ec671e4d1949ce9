#!/usr/bin/env python3
# uroce_suite_patch.py DIR - patches a COPY (DIR, gunzipped) of rdma-core 44's test suite so that
# test_rdmacm runs on uroce. tests/tests/libibverbs_pyverbs.rs runs it on the copy it makes in a
# temporary directory; the system's files are never touched.
#
# 1. The device's IP address. v44's RDMATestCase._get_ip_mac takes it from the net device under
#    /sys/class/infiniband/<dev>/device/net/, which uroce (like rxe) has none of, so every rdmacm
#    test skips ("doesn't have net interface"). Without that directory, the address is taken from
#    the device's GID table instead: an IPv4-mapped GID (::ffff:a.b.c.d, RoCEv2 index 1 on
#    uroce: its UROCE_ADDR) is the IPv4 address a.b.c.d, as the kernel made the GID from it.
#
# 2. One address per process. The suite forks its two sides (passive and active) from the test
#    process, and both bind the device's one address: on Linux both processes share one kernel
#    device. A uroce device belongs to one process: it is opened at the address UROCE_ADDR named
#    when the library was first used (in the test process, long before the fork), and a forked
#    child cannot reopen it elsewhere. So RDMACMBaseTest.two_nodes_rdmacm_traffic starts each side
#    as a fresh python (`python3 -c`), the passive on a device at the address after the test's
#    (the GID table's, last byte + 1: the test process may still hold its own device open), the
#    active at the one after that; both take the passive's as the test's ip_addr. The syncer
#    (Barrier) and notifier (Queue) are a multiprocessing manager's, whose proxies both sides
#    reach. The active side
#    binds its own device's address as the source (AddrInfo src) and connects to the passive's,
#    which is what the suite's `src=addr, dst=addr` is on one host. Exit codes, the 15 s
#    (150 x 0.1 s) bound and the verdicts are the suite's.
import sys

root = sys.argv[1]


def patch(name, old, new):
    path = f'{root}/{name}'
    text = open(path).read()
    assert text.count(old) == 1, f'{name}: the text to patch is not there once: {old[:60]!r}'
    open(path, 'w').write(text.replace(old, new))


patch('base.py', """    def _get_ip_mac(self, dev, port, idx):
        if not os.path.exists('/sys/class/infiniband/{}/device/net/'.format(dev)):
            self.args.append([dev, port, idx, None, None])
            return
""", """    def _get_ip_mac(self, dev, port, idx):
        if not os.path.exists('/sys/class/infiniband/{}/device/net/'.format(dev)):
            # uroce: the IPv4 address of the GID (::ffff:a.b.c.d)
            ip_addr = None
            if idx is not None:
                raw = d.Context(name=dev).query_gid(port, idx).gid.replace(':', '')
                if raw[:24] == '00000000000000000000ffff':
                    ip_addr = '.'.join(str(int(raw[24 + 2 * k:26 + 2 * k], 16)) for k in range(4))
            self.args.append([dev, port, idx, ip_addr, None])
            return
""")

patch('base.py', """        ctx = mp.get_context('fork')
        self.syncer = ctx.Barrier(NUM_OF_PROCESSES, timeout=15)
        self.notifier = ctx.Queue()
        passive = ctx.Process(target=test_flow,
                              kwargs={'connection_resources': connection_resources,
                                      'passive':True, **resource_kwargs})
        active = ctx.Process(target=test_flow,
                              kwargs={'connection_resources': connection_resources,
                                      'passive':False, **resource_kwargs})
        passive.start()
        active.start()
""", """        # uroce: each side a fresh python on its own device (uroce_suite_patch.py)
        manager = mp.Manager()
        self.addCleanup(manager.shutdown)
        self.syncer = manager.Barrier(NUM_OF_PROCESSES, timeout=15)
        self.notifier = manager.Queue()
        server = _uroce_next_addr(self.ip_addr)
        client = _uroce_next_addr(server)
        passive = _UroceSide(self, test_flow, server, server, None,
                             {'connection_resources': connection_resources,
                              'passive': True, **resource_kwargs})
        active = _UroceSide(self, test_flow, client, server, client,
                            {'connection_resources': connection_resources,
                             'passive': False, **resource_kwargs})
        self.addCleanup(passive.terminate)
        self.addCleanup(active.terminate)
""")

patch('base.py', """class RDMACMBaseTest(RDMATestCase):""", '''def _uroce_next_addr(addr):
    """The address after an IPv4 address (the last byte + 1)."""
    parts = addr.split('.')
    return '.'.join(parts[:3] + [str(int(parts[3]) + 1)])


_UROCE_CHILD = """
import multiprocessing, os, pickle, sys, importlib
sys.path[:0] = [os.environ['UROCE_SUITE_ROOT'], os.environ['UROCE_SUITE_DIR']]
multiprocessing.current_process().authkey = bytes.fromhex(os.environ['UROCE_SUITE_AUTHKEY'])
from args_parser import parser
side = pickle.loads(bytes.fromhex(os.environ['UROCE_SUITE_SIDE']))
parser.args = side['config']
case = getattr(importlib.import_module(side['module']), side['cls'])(side['method'])
for name, value in side['attrs'].items():
    setattr(case, name, value)
getattr(case, side['flow'])(**side['kwargs'])
"""


class _UroceSide:
    """One side of an rdmacm test: a fresh python whose uroce device is at `addr`, running
    `test_flow` of a copy of the test case whose ip_addr is the passive side's address
    (multiprocessing.Process's join, is_alive, exitcode, terminate)."""
    def __init__(self, case, test_flow, addr, ip_addr, src_addr, kwargs):
        import pickle
        here = os.path.dirname(os.path.abspath(__file__))
        # pyverbs' enums (port spaces) do not pickle: their values do
        kwargs = {k: int(v) if isinstance(v, int) and type(v) not in (int, bool) else v
                  for k, v in kwargs.items()}
        side = {'config': case.config, 'module': type(case).__module__,
                'cls': type(case).__name__, 'method': case._testMethodName,
                'flow': test_flow.__name__, 'kwargs': kwargs,
                'attrs': {'dev_name': case.dev_name, 'ib_port': case.ib_port,
                          'gid_index': case.gid_index, 'ip_addr': ip_addr,
                          'mac_addr': case.mac_addr, 'syncer': case.syncer,
                          'notifier': case.notifier}}
        env = dict(os.environ, UROCE_ADDR=addr, UROCE_SUITE_ROOT=os.path.dirname(here),
                   UROCE_SUITE_DIR=here,
                   UROCE_SUITE_AUTHKEY=mp.current_process().authkey.hex(),
                   UROCE_SUITE_SIDE=pickle.dumps(side).hex())
        if src_addr:
            env['UROCE_RDMACM_SRC'] = src_addr
        self.proc = subprocess.Popen([sys.executable, '-c', _UROCE_CHILD], env=env)
        self.exitcode = None

    def join(self, timeout):
        try:
            self.exitcode = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def is_alive(self):
        self.exitcode = self.proc.poll()
        return self.exitcode is None

    def terminate(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()


class RDMACMBaseTest(RDMATestCase):''')

patch('base_rdmacm.py', """            self.ai = AddrInfo(src=addr, dst=addr, dst_service=self.port,""",
      """            # uroce: the active side's device has its own address
            self.ai = AddrInfo(src=os.environ.get('UROCE_RDMACM_SRC', addr), dst=addr,
                               dst_service=self.port,""")
patch('base_rdmacm.py', """import abc
""", """import abc
import os
""")
