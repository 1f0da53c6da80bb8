// Package all registers every backend type (lib/backend's registry): a
// program or package that reads the registry imports it, blank.
package all

import (
	_ "potato-training/lib/backend/agent"
	_ "potato-training/lib/backend/local"
	_ "potato-training/lib/backend/slurm"
	_ "potato-training/lib/backend/ssh"
)
