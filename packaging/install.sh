#!/bin/sh
# Installs potato-training from this unpacked tarball, as make install
# does from a checkout: the binaries into PREFIX/bin, the Linux agents
# that an ssh or SLURM run copies to its host into
# PREFIX/lib/potato-training/linux-ARCH/ (where potato-dispatch looks for
# them, as ../lib/potato-training beside its own bin/), the man pages into
# PREFIX/share/man; and the systemd unit and the crontab line, examples to
# edit, into PREFIX/share/doc/potato-training.
#
#   ./install.sh                          # into /usr/local
#   PREFIX=$HOME/.local ./install.sh      # or: ./install.sh PREFIX=$HOME/.local
#   DESTDIR=/tmp/stage ./install.sh       # staged, for a package
#
# Nothing is built: this machine needs no Go.
set -eu
for arg in "$@"; do
	case $arg in
	PREFIX=* | DESTDIR=*) export "$arg" ;;
	*)
		echo "usage: [PREFIX=DIR] [DESTDIR=DIR] $0 [PREFIX=DIR] [DESTDIR=DIR]" >&2
		exit 2
		;;
	esac
done
PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}
case $PREFIX in
/*) ;;
*)
	echo "$0: PREFIX must be an absolute path, not $PREFIX" >&2
	exit 2
	;;
esac
here=$(cd "$(dirname "$0")" && pwd)
root=$DESTDIR$PREFIX

mkdir -p "$root/bin" "$root/share/man/man1" "$root/share/man/man5" "$root/share/doc/potato-training"
for f in "$here"/bin/*; do
	install -m 0755 "$f" "$root/bin/"
done
for d in "$here"/lib/potato-training/linux-*; do
	a=$(basename "$d")
	mkdir -p "$root/lib/potato-training/$a"
	install -m 0755 "$d/potato-agent" "$root/lib/potato-training/$a/potato-agent"
done
install -m 0644 "$here"/share/man/man1/*.1 "$root/share/man/man1/"
install -m 0644 "$here"/share/man/man5/*.5 "$root/share/man/man5/"
install -m 0644 "$here"/share/doc/potato-training/* "$root/share/doc/potato-training/"
echo "potato-training installed into $root; $PREFIX/bin must be on PATH"
