package gpu

import "testing"

func TestTorchSupports(t *testing.T) {
	// A torch 2.4 cu124 wheel's list.
	cu124 := []string{"sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"}
	for _, tc := range []struct {
		arch []string
		cap  string
		want bool
	}{
		{[]string{"sm_80"}, "8.6", true},  // same major, higher minor
		{[]string{"sm_86"}, "8.0", false}, // lower minor: no
		{[]string{"sm_90"}, "8.9", false}, // other major
		{[]string{"sm_80"}, "9.0", false}, // machine code does not run on a newer major
		{[]string{"sm_90"}, "9.0", true},
		{[]string{"compute_90"}, "9.0", true},  // PTX, same capability
		{[]string{"compute_90"}, "10.0", true}, // PTX, JIT for a newer GPU
		{[]string{"compute_80"}, "7.5", false}, // PTX never runs on an older GPU
		{[]string{"compute_86"}, "8.6", true},
		{[]string{"compute_86"}, "8.0", false},
		{[]string{"sm_100"}, "10.0", true},
		{[]string{"sm_100"}, "12.0", false},
		{[]string{"sm_120"}, "12.0", true},
		{[]string{"sm_120"}, "10.0", false},
		{[]string{"sm_100"}, "10.3", true},
		{[]string{"sm_90a"}, "9.0", true}, // arch-specific: exactly 9.0
		{[]string{"sm_100a"}, "10.3", false},
		{[]string{"compute_90a"}, "10.0", false},
		{[]string{"sm_100f"}, "10.3", true}, // family: the major's later minors
		{[]string{"SM_86"}, "8.9", true},
		{cu124, "9.0", true},
		{cu124, "8.9", true}, // L40S by sm_86
		{cu124, "10.0", false},
		{cu124, "12.0", false}, // RTX 5090 on a cu124 wheel
		{cu124, "3.7", false},  // K80
		{append(cu124, "compute_90"), "12.0", true},
		{[]string{"sm_75", "sm_80"}, "", true},        // unknown capability: usable
		{[]string{"sm_75", "sm_80"}, "[N/A]", true},   // unreadable capability: usable
		{nil, "9.0", false},                           // no kernels listed
		{[]string{"gfx90a", "sm_9"}, "9.0", false},    // unreadable names skipped
		{[]string{"sm_", "compute_x0"}, "9.0", false}, // malformed names skipped
	} {
		if got := TorchSupports(tc.arch, tc.cap); got != tc.want {
			t.Errorf("TorchSupports(%q, %q) = %v, want %v", tc.arch, tc.cap, got, tc.want)
		}
	}
}
