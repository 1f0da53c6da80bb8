# potato-training's probe: reports this host's facts for an ssh backend.
#
# sh reads it on ssh's standard input after a preamble that sets PYTHON, the
# interpreter for Python trainers, PACKAGES, the trainer's import names
# separated by spaces, and TORCH, "no-torch" when torch's facts are not
# wanted (its import takes seconds) unless PACKAGES names it. It prints one fact a line between potato-probe-begin
# and potato-probe-end (lib/probe's Parse reads them) and changes nothing on
# the host. Every command reads /dev/null, so that none eats the rest of
# this script from standard input, and the work is one function called on
# the last line, so that a script cut short in transit runs nothing.
#
# POSIX sh. The Python below is written so that Python 2.7 and 3.x can
# compile it: an interpreter too old for the trainers still says its version.

potato_probe_py='
import sys


def say(line):
    sys.stdout.write(line.rstrip() + "\n")
    sys.stdout.flush()


def short(e):
    text = ("%s: %s" % (type(e).__name__, e)).strip()
    lines = text.splitlines() or [text]
    return lines[0].encode("ascii", "backslashreplace").decode("ascii")


def find(importlib, name):
    try:
        return importlib.util.find_spec(name) is not None
    except Exception:
        return False


def report_torch(torch):
    version = str(getattr(torch, "__version__", "") or "unknown")
    cuda = getattr(getattr(torch, "version", None), "cuda", None) or "none"
    say("torch: %s %s" % (version, cuda))
    # The flags torch was compiled with, which need no working driver;
    # get_arch_list() answers [] whenever CUDA is not available.
    arch = None
    try:
        flags = torch._C._cuda_getArchFlags()
        if flags:
            arch = str(flags).split()
    except Exception:
        pass
    if arch is None:
        try:
            arch = [str(a) for a in torch.cuda.get_arch_list()]
        except Exception:
            arch = []
    say("torch-arch: " + " ".join(arch))


def probe(names, torch_wanted):
    import importlib.util
    missing = [n for n in names if not find(importlib, n)]
    # Importing torch takes seconds, importlib.metadata a tenth of one;
    # they are done when the facts of torch matter.
    torch_wanted = torch_wanted or "torch" in names
    if torch_wanted and find(importlib, "torch"):
        try:
            import torch
        except Exception as e:
            torch = None
            say("torch-error: " + short(e))
            if "torch" in names and "torch" not in missing:
                missing.append("torch")
        if torch is not None:
            report_torch(torch)
    say("missing: " + " ".join(missing))
    if not torch_wanted:
        return
    from importlib import metadata
    for dist in ("nvidia-cuda-nvrtc-cu12", "nvidia-cuda-nvrtc-cu13", "nvidia-cuda-nvrtc"):
        try:
            say("nvrtc: %s %s" % (dist, metadata.version(dist)))
        except Exception:
            pass


v = sys.version_info
say("python: %s %d.%d.%d" % (sys.executable or sys.argv[1], v[0], v[1], v[2]))
if tuple(v[:2]) >= (3, 8):
    probe(sys.argv[3:], sys.argv[2] != "no-torch")
'

potato_probe() {
	set -f
	IFS=' 	
'
	echo 'potato-probe-begin'
	echo "uname: $(uname -s 2>/dev/null </dev/null) $(uname -m 2>/dev/null </dev/null)"

	# timeout bounds a wedged driver or a hanging import where it exists.
	limit= smilimit=
	if command -v timeout >/dev/null 2>&1; then
		limit='timeout 60' smilimit='timeout 10'
	fi

	python=$PYTHON
	case $python in
	'~/'*) python=$HOME/${python#'~/'} ;;
	esac
	found=false
	case $python in
	*/*) [ -f "$python" ] && [ -x "$python" ] && found=true ;;
	?*) command -v "$python" >/dev/null 2>&1 && found=true ;;
	esac
	if $found; then
		$limit "$python" -c "$potato_probe_py" "$python" "${TORCH:-torch}" $PACKAGES </dev/null
		status=$?
		if [ "$status" -ne 0 ]; then
			echo "python-failed: $status $PYTHON"
		fi
	else
		echo "python-missing: $PYTHON"
	fi

	if command -v nvidia-smi >/dev/null 2>&1; then
		query=index,uuid,name,memory.total,memory.free,utilization.gpu
		fields=7
		out=$($smilimit nvidia-smi --query-gpu=$query,compute_cap --format=csv,noheader,nounits 2>&1 </dev/null)
		status=$?
		case $status:$out in
		0:*) ;;
		*'"compute_cap" is not a valid field'*)
			fields=6
			out=$($smilimit nvidia-smi --query-gpu=$query --format=csv,noheader,nounits 2>&1 </dev/null)
			status=$?
			;;
		esac
		echo "nvidia-smi-begin: $fields"
		if [ -n "$out" ]; then
			printf '%s\n' "$out"
		fi
		echo "nvidia-smi-end: $status"
	else
		echo 'nvidia-smi-missing'
	fi
	# The scheduler's commands, for a SLURM login node (SPEC M2, M4), and
	# the login shell.
	for c in sbatch squeue scancel scontrol; do
		p=$(command -v "$c" 2>/dev/null </dev/null) && echo "command: $c $p"
	done
	shell=$(getent passwd "$(id -u 2>/dev/null </dev/null)" 2>/dev/null </dev/null | cut -d: -f7)
	echo "shell: $shell"
	echo 'potato-probe-end'
}

potato_probe
