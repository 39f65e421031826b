-- job_submit.lua of the slurm-pool cluster attrs, for Slurm 22.05.
-- Written by `slurm-pool render`; do not edit: change the pool spec and render again.
-- SLURM_POOL is the policy data from the spec; the code after it is slurm-pool's
-- policy/job_submit.lua, unchanged.

local SLURM_POOL = {
	enabled = true,
	slurm = {
		release = "22.05",
		multiple_qos = false,
	},
	pool = {
		cluster = "attrs",
		on_error = "reject",
		admin_contact = "your cluster administrators",
		default_tier = nil,
		right_size_mig = true,
		checkpoint_signal = "USR1",
		warn_seconds = 120,
	},
	tiers = {
		standard = { max_gpus = nil, require_time = false, checkpoint = "none", gpu_shards = nil },
	},
	partitions = {
		main = { tier = "standard", accounts = nil, max_time = "UNLIMITED", gpu_types = { "h100" } },
	},
	projects = {
		lab = { tiers = { "standard" }, default_tier = nil, route = { standard = "main" } },
	},
	project_order = {
		"lab",
	},
	user_project = {
		alice = "lab",
	},
	gpu_types = {
		h100 = { mem_mb = 81920, mig = false, parents = { h100 = true } },
	},
	gpu_type_order = {
		"h100",
	},
	mig_by_size = {},
}

