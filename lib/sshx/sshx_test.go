package sshx

import (
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"potato-training/lib/config"
)

var common = []string{
	"-o", "BatchMode=yes",
	"-o", "ServerAliveInterval=5",
	"-o", "ServerAliveCountMax=3",
	"-o", "ExitOnForwardFailure=yes",
}

func TestArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		t    Target
		want []string
	}{
		{"host only", Target{Host: "gpu"}, nil},
		{"ssh_config", Target{Host: "gpu", SSHConfig: "/etc/potato/ssh_config"}, []string{"-F", "/etc/potato/ssh_config"}},
		{"user", Target{Host: "gpu", User: "svc"}, []string{"-l", "svc"}},
		{"port", Target{Host: "gpu", Port: 2222}, []string{"-p", "2222"}},
		{"identity", Target{Host: "gpu", IdentityFile: "/k/id"}, []string{"-i", "/k/id", "-o", "IdentitiesOnly=yes"}},
		{"all", Target{Host: "gpu", User: "svc", Port: 22, IdentityFile: "/k/id", SSHConfig: "/c"},
			[]string{"-F", "/c", "-l", "svc", "-p", "22", "-i", "/k/id", "-o", "IdentitiesOnly=yes"}},
		{"user and identity", Target{Host: "gpu", User: "svc", IdentityFile: "/k/my id"},
			[]string{"-l", "svc", "-i", "/k/my id", "-o", "IdentitiesOnly=yes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := append(append([]string{}, common...), tc.want...)
			if got := tc.t.Args(); !reflect.DeepEqual(got, want) {
				t.Errorf("Args() =\n%q\nwant\n%q", got, want)
			}
			if strings.Contains(strings.Join(tc.t.Args(), " "), tc.t.Host) {
				t.Errorf("Args() holds the host; it must be a separate argument")
			}
		})
	}
}

func TestArgsAcceptedBySSH(t *testing.T) {
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Skip("ssh is not installed")
	}
	tg := Target{Host: "gpu.example.org", User: "svc", Port: 2022, IdentityFile: "/nonexistent/id"}
	args := append([]string{"-G"}, tg.Args()...)
	out, err := exec.Command("ssh", append(args, "--", tg.Host)...).Output()
	if err != nil {
		t.Fatalf("ssh -G: %v", err)
	}
	for _, want := range []string{"user svc\n", "port 2022\n", "batchmode yes\n", "identitiesonly yes\n",
		"serveraliveinterval 5\n", "serveralivecountmax 3\n", "exitonforwardfailure yes\n", "hostname gpu.example.org\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("ssh -G output lacks %q", want)
		}
	}
}

func TestTargetOf(t *testing.T) {
	t.Setenv("HOME", "/home/ann")
	got := TargetOf(&config.Backend{Host: "gpu", User: "ann", Port: 22,
		IdentityFile: "~/.ssh/id_potato", SSHConfig: "~/potato/ssh_config"})
	want := Target{Host: "gpu", User: "ann", Port: 22,
		IdentityFile: "/home/ann/.ssh/id_potato", SSHConfig: "/home/ann/potato/ssh_config"}
	if got != want {
		t.Errorf("TargetOf = %+v, want %+v", got, want)
	}
	got = TargetOf(&config.Backend{Host: "gpu", IdentityFile: "/abs/~/id", SSHConfig: "~bob/cfg"})
	if got.IdentityFile != "/abs/~/id" || got.SSHConfig != "~bob/cfg" {
		t.Errorf("only a leading ~/ is expanded, got %+v", got)
	}
}

func TestTargetCheck(t *testing.T) {
	for _, tg := range []Target{
		{},
		{Host: "-oProxyCommand=touch /tmp/x"},
		{Host: "gpu example"},
		{Host: "gpu\n"},
		{Host: "gpu", User: "-x"},
		{Host: "gpu", Port: 70000},
	} {
		if err := tg.check(); err == nil {
			t.Errorf("check(%+v) = nil, want an error", tg)
		}
	}
	for _, tg := range []Target{{Host: "gpu"}, {Host: "ann@gpu.example.org"}, {Host: "::1", Port: 22}} {
		if err := tg.check(); err != nil {
			t.Errorf("check(%+v) = %v", tg, err)
		}
	}
}

func TestHomeRelative(t *testing.T) {
	for in, want := range map[string]string{
		"~": ".", "~/": ".", "~/.cache/potato-training": ".cache/potato-training",
		"/srv/jobs": "/srv/jobs", "jobs/x": "jobs/x", "~bob/x": "~bob/x",
	} {
		if got := homeRelative(in); got != want {
			t.Errorf("homeRelative(%q) = %q, want %q", in, got, want)
		}
	}
}
