/**
 * Changes inside a Pod's network namespace that netlink cannot make from the host, served by ONE
 * long-lived helper process instead of a process per Pod. Today: TX checksum offload off on the
 * Pod's interface (userspace datapath only: partial checksums from the Pod break OVS userspace
 * conntrack). netlink's ethtool family and the SIOCETHTOOL ioctl reach only the caller's own
 * namespace, and Node cannot enter another one, so the helper does: for each request it enters
 * the Pod's namespace (setns), makes the ioctl, reads it back, and returns to its own namespace.
 *
 * The helper is a short Perl program (perl-base is part of every Debian system, the agent's image
 * included) talking one line per request and one per answer over its stdin/stdout. It starts on
 * the first request (never on the kernel datapath, which needs none of this) and again after it
 * exits. Where it cannot run (no perl, an architecture whose setns number is not known here), each
 * request falls back to `nsenter ethtool`.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { execa } from 'execa';
import { type Clock, realClock } from '../clock.js';

/** setns(2)'s system call number per Node architecture name. */
const SETNS_SYSCALL: Partial<Record<NodeJS.Architecture, number>> = {
  x64: 308,
  arm64: 268,
  riscv64: 268,
  loong64: 268,
  arm: 375,
  ia32: 346,
  ppc64: 350,
  s390x: 339,
};

/**
 * Request: "tx-off<TAB>netns path<TAB>interface". Answer: "ok" or "err <reason>". 0x40000000 is
 * CLONE_NEWNET; SIOCETHTOOL 0x8946 with ETHTOOL_STXCSUM (0x17) sets and ETHTOOL_GTXCSUM (0x16)
 * reads back the same features `ethtool -K <if> tx off` turns off. If it cannot return to its own
 * namespace it exits rather than serve the next request from the wrong one.
 */
export const HELPER_SCRIPT = String.raw`
$| = 1;
my $SYS_setns = $ARGV[0];
open(my $home, '<', '/proc/self/ns/net') or die "open /proc/self/ns/net: $!\n";
sub txoff {
  my ($ns, $if) = @_;
  open(my $fh, '<', $ns) or die "open $ns: $!\n";
  syscall($SYS_setns, fileno($fh), 0x40000000) == 0 or die "enter $ns: $!\n";
  my $ok = eval {
    socket(my $s, 2, 2, 0) or die "socket: $!\n";
    my $set = pack('L L', 0x17, 0);
    ioctl($s, 0x8946, pack('Z16 P8 x16', $if, $set)) or die "turning TX checksum offload off on $if: $!\n";
    my $get = pack('L L', 0x16, 1);
    ioctl($s, 0x8946, pack('Z16 P8 x16', $if, $get)) or die "reading TX checksum offload of $if: $!\n";
    (unpack('L L', $get))[1] == 0 or die "TX checksum offload of $if is still on\n";
    1;
  };
  my $err = $@;
  syscall($SYS_setns, fileno($home), 0x40000000) == 0 or die "FATAL: returning to the helper's own namespace: $!\n";
  die $err unless $ok;
}
while (my $line = <STDIN>) {
  chomp $line;
  my ($op, $ns, $if) = split /\t/, $line, 3;
  if ($op eq 'tx-off' && defined $if) {
    if (eval { txoff($ns, $if); 1 }) { print "ok\n" } else { my $e = $@; die $e if $e =~ /^FATAL/; $e =~ s/\s+$//; $e =~ s/\n/ /g; print "err $e\n" }
  } else { print "err unknown request\n" }
}
`;

/** What the helper client needs of the process (real: a spawned perl; tests: a fake). */
export interface HelperProcess {
  write(line: string): void;
  onLine(fn: (line: string) => void): void;
  /** Called once when the process is gone (exit, or failing to start), with why. */
  onExit(fn: (why: string) => void): void;
  kill(): void;
}

/** Starts the helper; undefined when it cannot run on this machine. */
export type HelperSpawner = () => HelperProcess | undefined;

export function spawnPerlHelper(): HelperProcess | undefined {
  const setns = SETNS_SYSCALL[process.arch];
  if (setns === undefined) return undefined;
  const child: ChildProcessWithoutNullStreams = spawn('perl', ['-e', HELPER_SCRIPT, String(setns)], { stdio: ['pipe', 'pipe', 'pipe'] });
  // The agent's exit must not wait for its helper.
  child.unref();
  for (const s of [child.stdin, child.stdout, child.stderr] as unknown as { unref?: () => void }[]) s.unref?.();
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-2000)));
  child.stdin.on('error', () => undefined);
  const lines = createInterface({ input: child.stdout });
  return {
    write: (line) => child.stdin.write(line),
    onLine: (fn) => lines.on('line', fn),
    onExit: (fn) => {
      let told = false;
      const tell = (why: string) => {
        if (!told) fn(why);
        told = true;
      };
      child.on('error', (err) => tell(`could not start perl: ${err.message}`));
      child.on('exit', (code, signal) => tell(`exited (${signal ?? `status ${code}`})${stderr.trim() ? `: ${stderr.trim()}` : ''}`));
    },
    kill: () => child.kill('SIGKILL'),
  };
}

/** The per-Pod fallback: one `nsenter ethtool` process. */
export async function txOffByNsenter(netnsPath: string, ifName: string): Promise<void> {
  const r = await execa('nsenter', [`--net=${netnsPath}`, 'ethtool', '-K', ifName, 'tx', 'off'], { reject: false });
  if (r.exitCode !== 0) throw new Error(`ethtool -K ${ifName} tx off in ${netnsPath}: ${r.stderr.trim() || `exit ${r.exitCode}`}`);
}

interface Waiter {
  resolve: (line: string) => void;
  reject: (err: Error) => void;
}

export interface NetnsHelperOptions {
  spawn?: HelperSpawner;
  /** Used when the helper cannot run or will not start. */
  fallback?: (netnsPath: string, ifName: string) => Promise<void>;
  timeoutMs?: number;
  clock?: Clock;
  log?: { warn(obj: object, msg: string): void };
}

export class NetnsHelper {
  private proc?: HelperProcess | undefined;
  private waiters: Waiter[] = [];
  private queue: Promise<unknown> = Promise.resolve();
  /** False once the helper could not be started: the fallback serves from then on. */
  private usable = true;
  private readonly spawnHelper: HelperSpawner;
  private readonly fallback: (netnsPath: string, ifName: string) => Promise<void>;
  private readonly timeoutMs: number;
  private readonly clock: Clock;

  constructor(private readonly opts: NetnsHelperOptions = {}) {
    this.spawnHelper = opts.spawn ?? spawnPerlHelper;
    this.fallback = opts.fallback ?? txOffByNsenter;
    this.timeoutMs = opts.timeoutMs ?? 5000;
    this.clock = opts.clock ?? realClock;
  }

  /** Whether a helper process is running now. */
  get running(): boolean {
    return this.proc !== undefined;
  }

  private process(): HelperProcess | undefined {
    if (this.proc || !this.usable) return this.proc;
    const proc = this.spawnHelper();
    if (!proc) {
      this.usable = false;
      this.opts.log?.warn({ arch: process.arch }, 'netns helper: not available on this machine; one nsenter process per Pod instead');
      return undefined;
    }
    this.proc = proc;
    proc.onLine((line) => this.waiters.shift()?.resolve(line));
    proc.onExit((why) => {
      if (this.proc === proc) this.proc = undefined;
      const waiting = this.waiters;
      this.waiters = [];
      for (const w of waiting) w.reject(new Error(`netns helper ${why}`));
      if (/could not start/.test(why)) {
        this.usable = false;
        this.opts.log?.warn({ why }, 'netns helper: cannot start; one nsenter process per Pod instead');
      }
    });
    return proc;
  }

  private ask(line: string): Promise<string> {
    const run = () =>
      new Promise<string>((resolve, reject) => {
        const proc = this.process();
        if (!proc) return reject(new HelperUnavailable());
        let timedOut = false;
        const timer = this.clock.setTimeout(() => {
          // A wedged helper: kill it (its exit rejects this request); the next one starts afresh.
          timedOut = true;
          proc.kill();
        }, this.timeoutMs);
        this.waiters.push({
          resolve: (l) => {
            this.clock.clearTimeout(timer);
            resolve(l);
          },
          reject: (e) => {
            this.clock.clearTimeout(timer);
            reject(timedOut ? new Error(`netns helper gave no answer within ${this.timeoutMs} ms (killed)`) : e);
          },
        });
        proc.write(`${line}\n`);
      });
    const result = this.queue.then(run, run);
    this.queue = result.catch(() => undefined);
    return result;
  }

  /** Turns TX checksum offload off on `ifName` inside the namespace at `netnsPath`. */
  async disableTxOffload(netnsPath: string, ifName: string): Promise<void> {
    if (/[\t\n]/.test(netnsPath + ifName)) throw new Error(`netns path or interface name contains a tab or newline: ${JSON.stringify([netnsPath, ifName])}`);
    let answer: string;
    try {
      answer = await this.ask(`tx-off\t${netnsPath}\t${ifName}`);
    } catch (err) {
      if (err instanceof HelperUnavailable) return this.fallback(netnsPath, ifName);
      throw err;
    }
    if (answer !== 'ok') throw new Error(answer.replace(/^err /, ''));
  }

  close(): void {
    this.proc?.kill();
    this.proc = undefined;
  }
}

class HelperUnavailable extends Error {}
