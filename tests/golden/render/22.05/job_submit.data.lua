-- job_submit.lua of the slurm-pool cluster pool, for Slurm 22.05.
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
		cluster = "pool",
		on_error = "reject",
		admin_contact = "your cluster administrators",
		default_tier = "scavenger",
		right_size_mig = true,
		checkpoint_signal = "USR1",
		warn_seconds = 60,
	},
	tiers = {
		guaranteed = { max_gpus = nil, require_time = false, checkpoint = "none", gpu_shards = nil },
		shared = { max_gpus = 4, require_time = true, checkpoint = "add_requeue", gpu_shards = nil },
		scavenger = { max_gpus = nil, require_time = false, checkpoint = "reject", gpu_shards = nil },
		["k8s-lend"] = { max_gpus = nil, require_time = false, checkpoint = "none", gpu_shards = nil },
	},
	partitions = {
		["a-owner"] = { tier = "guaranteed", accounts = { proja = true }, max_time = "UNLIMITED", gpu_types = { "nvidia_a100-sxm4-80gb" } },
		["b-owner"] = { tier = "guaranteed", accounts = { projb = true }, max_time = "UNLIMITED", gpu_types = { "nvidia_h100_80gb_hbm3" } },
		["c-owner"] = { tier = "guaranteed", accounts = { projc = true }, max_time = "UNLIMITED", gpu_types = { "nvidia_a100-sxm4-40gb", "nvidia_a100_1g.5gb", "nvidia_a100_2g.10gb", "nvidia_a100_3g.20gb" } },
		shared = { tier = "shared", accounts = nil, max_time = "2-00:00:00", gpu_types = { "nvidia_a100-sxm4-80gb", "nvidia_h100_80gb_hbm3", "nvidia_a100-sxm4-40gb", "nvidia_a100_1g.5gb", "nvidia_a100_2g.10gb", "nvidia_a100_3g.20gb" } },
		scavenger = { tier = "scavenger", accounts = nil, max_time = "UNLIMITED", gpu_types = { "nvidia_a100-sxm4-80gb", "nvidia_h100_80gb_hbm3", "nvidia_a100-sxm4-40gb", "nvidia_a100_1g.5gb", "nvidia_a100_2g.10gb", "nvidia_a100_3g.20gb" } },
		["k8s-lend"] = { tier = "k8s-lend", accounts = { ["k8s-bridge"] = true }, max_time = "UNLIMITED", gpu_types = { "nvidia_a100-sxm4-80gb", "nvidia_h100_80gb_hbm3", "nvidia_a100-sxm4-40gb", "nvidia_a100_1g.5gb", "nvidia_a100_2g.10gb", "nvidia_a100_3g.20gb" } },
	},
	projects = {
		proja = { tiers = { "guaranteed", "shared", "scavenger" }, default_tier = "guaranteed", route = { guaranteed = "a-owner", shared = "shared", scavenger = "scavenger" } },
		projb = { tiers = { "guaranteed", "shared", "scavenger" }, default_tier = "guaranteed", route = { guaranteed = "b-owner", shared = "shared", scavenger = "scavenger" } },
		projc = { tiers = { "guaranteed", "shared", "scavenger" }, default_tier = "guaranteed", route = { guaranteed = "c-owner", shared = "shared", scavenger = "scavenger" } },
		["k8s-bridge"] = { tiers = { "k8s-lend" }, default_tier = nil, route = { ["k8s-lend"] = "k8s-lend" } },
	},
	project_order = {
		"proja",
		"projb",
		"projc",
		"k8s-bridge",
	},
	user_project = {
		alice = "proja",
		bob = "projb",
		carol = "projc",
		slurmpool = "k8s-bridge",
	},
	gpu_types = {
		["nvidia_a100-sxm4-80gb"] = { mem_mb = 81920, mig = false, parents = { ["nvidia_a100-sxm4-80gb"] = true } },
		nvidia_h100_80gb_hbm3 = { mem_mb = 81920, mig = false, parents = { nvidia_h100_80gb_hbm3 = true } },
		["nvidia_a100-sxm4-40gb"] = { mem_mb = 40960, mig = false, parents = { ["nvidia_a100-sxm4-40gb"] = true } },
		["nvidia_a100_1g.5gb"] = { mem_mb = 5120, mig = true, parents = { ["nvidia_a100-sxm4-40gb"] = true } },
		["nvidia_a100_2g.10gb"] = { mem_mb = 10240, mig = true, parents = { ["nvidia_a100-sxm4-40gb"] = true } },
		["nvidia_a100_3g.20gb"] = { mem_mb = 20480, mig = true, parents = { ["nvidia_a100-sxm4-40gb"] = true } },
	},
	gpu_type_order = {
		"nvidia_a100-sxm4-80gb",
		"nvidia_h100_80gb_hbm3",
		"nvidia_a100-sxm4-40gb",
		"nvidia_a100_1g.5gb",
		"nvidia_a100_2g.10gb",
		"nvidia_a100_3g.20gb",
	},
	mig_by_size = {
		"nvidia_a100_1g.5gb",
		"nvidia_a100_2g.10gb",
		"nvidia_a100_3g.20gb",
	},
}

