-- job_submit.lua of the slurm-pool cluster floating, for Slurm 22.05.
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
		cluster = "floating",
		on_error = "reject",
		admin_contact = "your cluster administrators",
		default_tier = "scavenger",
		right_size_mig = true,
		checkpoint_signal = "USR1",
		warn_seconds = 10,
	},
	tiers = {
		guaranteed = { max_gpus = nil, require_time = false, checkpoint = "none", gpu_shards = nil },
		shared = { max_gpus = nil, require_time = false, checkpoint = "add_requeue", gpu_shards = nil },
		scavenger = { max_gpus = nil, require_time = false, checkpoint = "none", gpu_shards = nil },
		["k8s-lend"] = { max_gpus = nil, require_time = false, checkpoint = "none", gpu_shards = nil },
	},
	partitions = {
		["a-owner"] = { tier = "guaranteed", accounts = { proja = true }, max_time = "UNLIMITED", gpu_types = { "nvidia_a100-sxm4-80gb" } },
		floating = { tier = "guaranteed", accounts = { projd = true, proje = true }, max_time = "UNLIMITED", gpu_types = { "nvidia_h100_80gb_hbm3" } },
		shared = { tier = "shared", accounts = nil, max_time = "2-00:00:00", gpu_types = { "nvidia_a100-sxm4-80gb", "nvidia_h100_80gb_hbm3" } },
		scavenger = { tier = "scavenger", accounts = nil, max_time = "UNLIMITED", gpu_types = { "nvidia_a100-sxm4-80gb", "nvidia_h100_80gb_hbm3" } },
		["k8s-lend"] = { tier = "k8s-lend", accounts = { ["k8s-bridge"] = true }, max_time = "UNLIMITED", gpu_types = { "nvidia_a100-sxm4-80gb", "nvidia_h100_80gb_hbm3" } },
	},
	projects = {
		proja = { tiers = { "guaranteed", "shared", "scavenger" }, default_tier = "guaranteed", route = { guaranteed = "a-owner", shared = "shared", scavenger = "scavenger" } },
		projd = { tiers = { "guaranteed", "shared", "scavenger" }, default_tier = "guaranteed", route = { guaranteed = "floating", shared = "shared", scavenger = "scavenger" }, guarantee = { qos = "guaranteed-projd", tier = "guaranteed", partition = "floating", overflow = "shared", overflow_partition = "shared", gpus = { { type = "", count = 4 } } } },
		proje = { tiers = { "guaranteed", "shared", "scavenger" }, default_tier = "guaranteed", route = { guaranteed = "floating", shared = "shared", scavenger = "scavenger" }, guarantee = { qos = "guaranteed-proje", tier = "guaranteed", partition = "floating", overflow = "shared", overflow_partition = "shared", gpus = { { type = "nvidia_h100_80gb_hbm3", count = 2 } } } },
		projx = { tiers = { "shared", "scavenger" }, default_tier = "scavenger", route = { shared = "shared", scavenger = "scavenger" } },
		["k8s-bridge"] = { tiers = { "k8s-lend" }, default_tier = nil, route = { ["k8s-lend"] = "k8s-lend" } },
	},
	project_order = {
		"proja",
		"projd",
		"proje",
		"projx",
		"k8s-bridge",
	},
	user_project = {
		alice = "proja",
		dave = "projd",
		erin = "proje",
		xavier = "projx",
		slurmpool = "k8s-bridge",
	},
	gpu_types = {
		["nvidia_a100-sxm4-80gb"] = { mem_mb = 81920, mig = false, parents = { ["nvidia_a100-sxm4-80gb"] = true } },
		nvidia_h100_80gb_hbm3 = { mem_mb = 81920, mig = false, parents = { nvidia_h100_80gb_hbm3 = true } },
	},
	gpu_type_order = {
		"nvidia_a100-sxm4-80gb",
		"nvidia_h100_80gb_hbm3",
	},
	mig_by_size = {},
	guarantees = {
		partition = "floating",
		qos = { ["guaranteed-projd"] = "projd", ["guaranteed-proje"] = "proje" },
	},
}

