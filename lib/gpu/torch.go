package gpu

import (
	"strconv"
	"strings"
)

// TorchSupports reports whether a torch built for archList, the names
// torch.cuda.get_arch_list() returns ("sm_80", "sm_90a", "compute_90"),
// has kernels for a GPU of compute capability computeCap ("8.6", "12.0"),
// the rule behind SPEC S5's "(torch there has no kernels for it)".
//
// sm_XY is machine code, which runs on the same major with an equal or
// higher minor: sm_80 covers 8.0 and 8.6, not 9.0, and sm_86 not 8.0.
// compute_XY is PTX, which the driver compiles for any GPU of capability
// X.Y or higher. The arch-specific sm_XYa and compute_XYa cover X.Y alone;
// the family-specific sm_XYf is read as sm_XY. The last digit is the minor,
// so sm_100 is 10.0 and sm_120 is 12.0.
//
// An unknown or unreadable computeCap is true: nothing says torch cannot
// use the GPU. An empty archList is false, since it names no kernels;
// whether an empty list means a CPU build or a list torch did not give is
// the caller's call. Names it cannot read (a ROCm "gfx90a") are skipped.
func TorchSupports(archList []string, computeCap string) bool {
	major, minor, ok := parseComputeCap(computeCap)
	if !ok {
		return true
	}
	for _, a := range archList {
		ptx, am, an, suffix, ok := parseArch(a)
		if !ok {
			continue
		}
		switch {
		case suffix == 'a':
			if am == major && an == minor {
				return true
			}
		case ptx:
			if am < major || am == major && an <= minor {
				return true
			}
		default:
			if am == major && an <= minor {
				return true
			}
		}
	}
	return false
}

// parseComputeCap reads nvidia-smi's "X.Y".
func parseComputeCap(s string) (major, minor int, ok bool) {
	ma, mi, found := strings.Cut(strings.TrimSpace(s), ".")
	if !found {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(ma)
	minor, err2 := strconv.Atoi(mi)
	if err1 != nil || err2 != nil || major < 0 || minor < 0 {
		return 0, 0, false
	}
	return major, minor, true
}

// parseArch reads "sm_86", "sm_90a", "sm_100f" or "compute_90"; suffix is
// the trailing letter, 0 when there is none.
func parseArch(s string) (ptx bool, major, minor int, suffix byte, ok bool) {
	s = strings.ToLower(strings.TrimSpace(s))
	digits, isSM := strings.CutPrefix(s, "sm_")
	if !isSM {
		var isPTX bool
		if digits, isPTX = strings.CutPrefix(s, "compute_"); !isPTX {
			return false, 0, 0, 0, false
		}
		ptx = true
	}
	if n := len(digits); n > 0 && (digits[n-1] == 'a' || digits[n-1] == 'f') {
		suffix = digits[n-1]
		digits = digits[:n-1]
	}
	if len(digits) < 2 || strings.Trim(digits, "0123456789") != "" {
		return false, 0, 0, 0, false
	}
	major, _ = strconv.Atoi(digits[:len(digits)-1])
	minor = int(digits[len(digits)-1] - '0')
	return ptx, major, minor, suffix, true
}
