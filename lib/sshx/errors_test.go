package sshx

import (
	"errors"
	"testing"
	"time"
)

// Real stderr of OpenSSH 9.2 (lines end in \r\n on a failed login).
var sshStderr = []struct {
	name, stderr, reason string
}{
	{"password only under BatchMode",
		"potatopw@127.0.0.1: Permission denied (publickey,password).\r\n", ReasonPermissionDenied},
	{"key refused",
		"Warning: Permanently added '[127.0.0.1]:2222' (ED25519) to the list of known hosts.\r\nann@gpu.example.org: Permission denied (publickey).\r\n", ReasonPermissionDenied},
	{"unreadable key, then refused",
		"Load key \"/home/ann/.ssh/id_potato\": Permission denied\r\nann@gpu.example.org: Permission denied (publickey).\r\n", ReasonPermissionDenied},
	{"closed port",
		"ssh: connect to host 127.0.0.1 port 2299: Connection refused\r\n", ReasonRefused},
	{"unknown name",
		"ssh: Could not resolve hostname nonexistent.invalid: Name or service not known\r\n", ReasonResolve},
	{"temporary resolver failure",
		"ssh: Could not resolve hostname gpu.example.org: Temporary failure in name resolution\r\n", ReasonResolve},
	{"connect timeout",
		"ssh: connect to host 10.255.255.1 port 22: Connection timed out\r\n", ReasonTimedOut},
	{"banner timeout",
		"Connection timed out during banner exchange\r\nConnection to 10.255.255.1 port 22 timed out\r\n", ReasonTimedOut},
	{"unknown host key, strict",
		"No ED25519 host key is known for [127.0.0.1]:2222 and you have requested strict checking.\r\nHost key verification failed.\r\n", ReasonHostKey},
	{"changed host key", `@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @
@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!
Someone could be eavesdropping on you right now (man-in-the-middle attack)!
It is also possible that a host key has just been changed.
The fingerprint for the ED25519 key sent by the remote host is
SHA256:VQvUj3TQHHnIMU55GjblXr20nvcIrb5LMmGHFdv02Pw.
Please contact your system administrator.
Add correct host key in /tmp/badkh to get rid of this message.
Offending ED25519 key in /tmp/badkh:1
  remove with:
  ssh-keygen -f "/tmp/badkh" -R "[127.0.0.1]:2222"
Host key for [127.0.0.1]:2222 has changed and you have requested strict checking.
Host key verification failed.
`, ReasonHostKey},
	{"server closes at once",
		"kex_exchange_identification: Connection closed by remote host\r\nConnection closed by 127.0.0.1 port 2298\r\n", ReasonClosed},
	{"server closes the session",
		"Connection to gpu.example.org closed by remote host.\r\n", ReasonClosed},
	{"reset",
		"kex_exchange_identification: read: Connection reset by peer\r\nConnection reset by 127.0.0.1 port 2222\r\n", ReasonReset},
	{"no route",
		"ssh: connect to host 10.1.2.3 port 22: No route to host\r\n", "No route to host"},
	{"keep-alive gave up",
		"Timeout, server gpu.example.org not responding.\r\n", "Timeout, server gpu.example.org not responding"},
	{"missing -F file",
		"Can't open user config file /etc/potato/ssh_config: No such file or directory\n", "Can't open user config file /etc/potato/ssh_config: No such file or directory"},
	{"refused forward",
		"Error: remote port forwarding failed for listen path /root/nope.sock\n", "Error: remote port forwarding failed for listen path /root/nope.sock"},
	{"control socket in use",
		"ControlSocket /tmp/c/bc99 already exists, disabling multiplexing\n", ReasonInUse},
	{"nothing", "", "ssh exited with status 255"},
}

func TestTranslate(t *testing.T) {
	for _, tc := range sshStderr {
		t.Run(tc.name, func(t *testing.T) {
			e := translate("gpu.example.org", []byte(tc.stderr))
			if e.Reason != tc.reason {
				t.Errorf("reason %q, want %q", e.Reason, tc.reason)
			}
			if e.Host != "gpu.example.org" {
				t.Errorf("host %q", e.Host)
			}
			if tc.stderr != "" && !isSSHFailure([]byte(tc.stderr)) {
				t.Errorf("isSSHFailure = false for ssh's own message")
			}
		})
	}
}

// TestF1Text pins SPEC F1's message.
func TestF1Text(t *testing.T) {
	err := error(translate("gpu.example.org", []byte("svc@gpu.example.org: Permission denied (publickey,password).\r\n")))
	if got, want := err.Error(), "ssh to gpu.example.org failed: Permission denied"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	var ce *ConnError
	if !errors.As(err, &ce) {
		t.Errorf("not a *ConnError")
	}
}

// TestF7Text pins SPEC F7's message.
func TestF7Text(t *testing.T) {
	err := &StallError{Host: "gpu.example.org", Seconds: int((180 * time.Second).Seconds())}
	if got, want := err.Error(), "The copy from gpu.example.org sent nothing for 180 s"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestRemoteCommandOutputIsNotSSH(t *testing.T) {
	for _, s := range []string{
		"",
		"Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: bad\n",
		"rsync: [sender] change_dir \"/srv/x\" failed: Permission denied (13)\nrsync error: some files/attrs were not transferred (see previous errors) (code 23) at main.c(1338) [sender=3.2.7]\n",
	} {
		if isSSHFailure([]byte(s)) {
			t.Errorf("isSSHFailure(%q) = true", s)
		}
	}
}

func TestRemoteErrorText(t *testing.T) {
	e := &RemoteError{Host: "gpu", Command: "python3 -c 'import torch'", ExitCode: 1,
		Stderr: "Traceback (most recent call last):\nModuleNotFoundError: No module named 'torch'\n"}
	want := `remote command "python3 -c 'import torch'" on gpu exited with status 1: ModuleNotFoundError: No module named 'torch'`
	if e.Error() != want {
		t.Errorf("got  %s\nwant %s", e.Error(), want)
	}
	long := &RemoteError{Host: "gpu", Command: "set -e\nfor i in 1 2; do echo $i; done", ExitCode: 2}
	if got, want := long.Error(), `remote command "set -e..." on gpu exited with status 2`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestLastLine(t *testing.T) {
	for in, want := range map[string]string{
		"": "", "one": "one", "a\nb\n": "b", "a\n  why it failed  \n\n": "why it failed",
	} {
		if got := LastLine(in); got != want {
			t.Errorf("LastLine(%q) = %q, want %q", in, got, want)
		}
	}
}
