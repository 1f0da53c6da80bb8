"""Build hook of the potato-training wheels.

make dist runs pip wheel on this directory once per platform, with
POTATO_DIST_PLATFORM (linux-amd64, linux-arm64, darwin-amd64 or
darwin-arm64) and POTATO_DIST_TREE, the installation tree it laid out
for that platform's tarball: bin/, lib/potato-training/ and share/man/.
The hook gives the wheel that platform's tag, and puts bin/'s binaries
in the wheel's scripts (.data/scripts/, which pip installs into the
environment's bin/) and lib/ and share/man/ in its data (.data/data/,
installed under the environment's prefix), so that an environment's
layout is the tarball's.
"""

import os

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

# The platform tag of each platform. The binaries are built with
# CGO_ENABLED=0: static on Linux, needing no glibc at all, so
# manylinux_2_17 claims no more than they need. On macOS, Go 1.26's
# linker writes 12.0 as the binaries' minimum version (LC_BUILD_VERSION),
# and macOS 11 refuses to run them: the tag says 12_0, not 11_0.
TAGS = {
    "linux-amd64": "manylinux_2_17_x86_64",
    "linux-arm64": "manylinux_2_17_aarch64",
    "darwin-amd64": "macosx_12_0_x86_64",
    "darwin-arm64": "macosx_12_0_arm64",
}


class CustomBuildHook(BuildHookInterface):
    def initialize(self, version, build_data):
        if self.target_name != "wheel":
            raise RuntimeError("potato-training builds wheels only: make dist")
        platform = os.environ.get("POTATO_DIST_PLATFORM", "")
        tree = os.environ.get("POTATO_DIST_TREE", "")
        if platform not in TAGS:
            raise RuntimeError(
                f"POTATO_DIST_PLATFORM={platform!r}: want one of {', '.join(TAGS)}; build with make dist"
            )
        bindir = os.path.join(tree, "bin")
        if not os.path.isdir(bindir):
            raise RuntimeError(f"POTATO_DIST_TREE={tree!r} has no bin/: build with make dist")
        build_data["tag"] = f"py3-none-{TAGS[platform]}"
        build_data["pure_python"] = False
        build_data["shared_scripts"] = {
            os.path.join(bindir, name): name for name in sorted(os.listdir(bindir))
        }
        # File by file: hatchling filters the files of a directory given
        # here through the project's selection, which has none.
        data = {}
        for top in ("lib/potato-training", "share/man"):
            for dirpath, dirnames, filenames in os.walk(os.path.join(tree, top)):
                dirnames.sort()
                for name in sorted(filenames):
                    path = os.path.join(dirpath, name)
                    data[path] = os.path.relpath(path, tree).replace(os.sep, "/")
        if not any(p.endswith("/potato-agent") for p in data.values()):
            raise RuntimeError(f"POTATO_DIST_TREE={tree!r} has no lib/potato-training/linux-ARCH/potato-agent")
        build_data["shared_data"] = data
