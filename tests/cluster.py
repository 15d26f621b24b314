"""Hosts for tests and benchmarks of jobs on other hosts over ssh (`launcher = "ssh"`):

- `Fake`: hosts that are this host, reached through fakessh.py (ssh's stand-in); a host
  named in a file does not answer.  Needs nothing.
- `Namespaces`: real hosts as far as the network goes: network namespaces joined to this
  host by a bridge, each with its own OpenSSH sshd.  Needs root, `ip` and sshd
  (`missing()` says which is not there).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "bin")
FAKESSH = os.path.join(ROOT, "tests", "fakessh.py")
NODE = [sys.executable, os.path.join(BIN, "hpcsched"), "node"]


class Fake:
    """Hosts that are this host, reached through fakessh.py; `down` takes one off the net."""

    name = "fake"

    def __init__(self, tmp: Path):
        self.downfile, self.losefile = tmp / "down", tmp / "lose"
        self.hosts = ["node01", "node02"]

    def config(self) -> str:
        return f"ssh = {json.dumps([sys.executable, FAKESSH])}\n"

    def env(self) -> dict:
        return {"FAKESSH_DOWN": str(self.downfile), "FAKESSH_LOSE": str(self.losefile)}

    def lose(self, host: str, then_down: bool = False) -> None:
        """The host runs what it is asked, and its answers are lost on the way back (once,
        and then it does not answer at all: `then_down`)."""
        self.losefile.write_text(host + ("\nthen-down\n" if then_down else "\n"))

    def heal(self) -> None:
        self.losefile.write_text("")

    def down(self, host: str) -> None:
        self.downfile.write_text(host + "\n")

    def up(self, host: str) -> None:
        self.downfile.write_text("")

    def drop(self, spool: Path) -> int:
        """End every open connection (here: the waiters' stand-ins); how many."""
        return kill_where(lambda line: str(spool).encode() in line and b"wait" in line)

    def close(self) -> None:
        pass


def site(tmp: Path, hosts, settings: str = "server_interval = 0.5\nkill_grace = 1\nnode_check_rate = 3\n"
         "job_stat_rate = 0.5\n") -> tuple[Path, dict, Path, Path]:
    """A test-rig site under `tmp` whose two nodes are `hosts`, reached over ssh, the
    node side's spool of each under tmp/spool: (home, env of its commands, a work
    directory, the spool)."""
    from hpcsched.store.site import init_site
    home = tmp / "home"
    init_site(home, nodes=2, cores=2)
    text = (home / "config.toml").read_text()
    assert 'names = "node[01-02]"' in text
    text = text.replace('names = "node[01-02]"', f'names = "{",".join(hosts.hosts)}"')
    spool = tmp / "spool"
    (home / "config.toml").write_text(
        settings + 'launcher = "ssh"\n' + hosts.config() + f"node_command = {json.dumps(NODE)}\n"
        f'node_spool = "{spool}/{{host}}"\n' + text)
    (tmp / "alice").mkdir()
    env = dict(os.environ, HPCSCHED_HOME=str(home), HPCSCHED_USER="alice", HOME=str(tmp / "alice"),
               PATH=f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}", **hosts.env())
    env.pop("HPCSCHED_FLAVOR", None)
    work = tmp / "work"
    work.mkdir()
    hosts.spool = spool
    return home, env, work, spool


def start_server(home: Path, env: dict, log: Path) -> subprocess.Popen:
    """`hpcsched server` for the site, once it answers commands."""
    p = subprocess.Popen([sys.executable, "-m", "hpcsched", "server"], cwd=ROOT, env=env,
                         stdout=subprocess.DEVNULL, stderr=open(log, "ab"), start_new_session=True)
    for _ in range(200):
        if (home / "commands.sock").exists() or p.poll() is not None:
            break
        time.sleep(0.05)
    return p


def missing() -> str | None:
    """Why the namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "not root: network namespaces need it"
    for tool in ("ip", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not os.path.exists("/usr/sbin/sshd"):
        return "sshd is not installed (Debian: openssh-server)"
    probe = subprocess.run(["ip", "netns", "add", "hpcst-probe"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"ip netns add fails: {probe.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", "hpcst-probe"], capture_output=True)
    return None


class Namespaces:
    """Two network namespaces, n1 and n2, joined to this host by a bridge (veth pairs;
    addresses of 10.213.0.0/24 on the bridge and inside the namespaces only), each with its
    own sshd, a host key and a user key made for the test; ssh reaches them by name
    through a config file of the test's, from this host and from each other."""

    name = "netns"

    def __init__(self, tmp: Path):
        self.tmp, self.hosts = tmp, ["n1", "n2"]
        tag = f"{os.getpid() % 10000}"
        self.ns = {h: f"hpcst{tag}{h}" for h in self.hosts}
        self.bridge = f"hb{tag}"
        try:
            self._make(tmp, tag)
        except BaseException:
            self.close()
            raise

    def _make(self, tmp: Path, tag: str) -> None:
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / "hostkey")], check=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / "userkey")], check=True)
        shutil.copy(tmp / "userkey.pub", tmp / "authorized_keys")
        os.makedirs("/run/sshd", exist_ok=True)  # (sshd's privilege separation directory)
        for argv in (["ip", "link", "add", self.bridge, "type", "bridge"],
                     ["ip", "addr", "add", "10.213.0.1/24", "dev", self.bridge], ["ip", "link", "set", self.bridge, "up"]):
            subprocess.run(argv, check=True, capture_output=True)
        lines = []
        for i, host in enumerate(self.hosts, 2):
            ns, there = self.ns[host], f"10.213.0.{i}"
            veth, peer = f"hv{tag}{i}", f"hp{tag}{i}"
            for argv in (["ip", "netns", "add", ns], ["ip", "link", "add", veth, "type", "veth", "peer", "name", peer],
                         ["ip", "link", "set", peer, "netns", ns], ["ip", "link", "set", veth, "master", self.bridge],
                         ["ip", "link", "set", veth, "up"],
                         ["ip", "netns", "exec", ns, "ip", "addr", "add", f"{there}/24", "dev", peer],
                         ["ip", "netns", "exec", ns, "ip", "link", "set", peer, "up"],
                         ["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"]):
                subprocess.run(argv, check=True, capture_output=True)
            (tmp / f"sshd_{host}").write_text(
                f"ListenAddress {there}\nHostKey {tmp}/hostkey\nAuthorizedKeysFile {tmp}/authorized_keys\n"
                f"PermitRootLogin prohibit-password\nPasswordAuthentication no\nUsePAM no\nStrictModes no\n"
                f"PidFile {tmp}/sshd_{host}.pid\n")
            lines.append(f"Host {host}\n  HostName {there}\n")
            self.start_sshd(host)
        (tmp / "ssh_config").write_text("".join(lines) + (
            f"Host *\n  IdentityFile {tmp}/userkey\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n"
            "  LogLevel ERROR\n  BatchMode yes\n  ConnectTimeout 5\n"))

    def start_sshd(self, host: str) -> None:
        subprocess.run(["ip", "netns", "exec", self.ns[host], "/usr/sbin/sshd", "-f", str(self.tmp / f"sshd_{host}"),
                        "-E", str(self.tmp / f"sshd_{host}.log")], check=True)
        for _ in range(100):
            if (self.tmp / f"sshd_{host}.pid").exists():
                break
            time.sleep(0.05)

    def config(self) -> str:
        return f'ssh = ["ssh", "-F", "{self.tmp}/ssh_config"]\n'

    def env(self) -> dict:
        return {}

    def down(self, host: str) -> None:
        """Kill the host's sshd and every connection it holds (what runs of jobs there, in
        sessions of their own, stays)."""
        out = subprocess.run(["ip", "netns", "pids", self.ns[host]], capture_output=True, text=True).stdout.split()
        for pid in out:
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() == "sshd":
                    os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
        (self.tmp / f"sshd_{host}.pid").unlink(missing_ok=True)

    def up(self, host: str) -> None:
        self.start_sshd(host)

    def drop(self, spool: Path) -> int:
        """End every open connection: each sshd but the listeners (runs stay)."""
        listeners = {(self.tmp / f"sshd_{h}.pid").read_text().strip() for h in self.hosts}
        return kill_where(lambda line: line.startswith(b"sshd") and b"listener" not in line, listeners)

    def close(self) -> None:
        for host, ns in self.ns.items():
            out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for pid in out:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


def kill_where(match, spare=()) -> int:
    """SIGKILL each process whose command line matches; how many."""
    killed = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit() and pid not in spare and int(pid) != os.getpid():
            try:
                if match(Path(f"/proc/{pid}/cmdline").read_bytes()):
                    os.kill(int(pid), signal.SIGKILL)
                    killed += 1
            except OSError:
                pass
    return killed


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def runs(spool: Path) -> list[int]:
    """Live processes started by a run on the test's nodes (their keepers and jobs)."""
    found = []
    needle = str(spool).encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in cmdline and b"hpcsched-job" in cmdline and state != "Z":
            found.append(int(pid))
    return found
