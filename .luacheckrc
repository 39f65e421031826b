-- luacheck configuration for slurm-pool's Lua (job_submit/lua runs on Lua 5.1 to 5.4).
std = "lua51"
max_line_length = 120
-- Slurm's job_submit/lua plugin provides `slurm` and calls the two entry points.
read_globals = { "slurm" }
globals = { "slurm_job_submit", "slurm_job_modify" }
files["slurm_pool/policy/job_submit.lua"] = {
	-- The policy data that `slurm-pool render` writes in front of the code (a
	-- local there); on its own the file sees it as a global.
	read_globals = { "SLURM_POOL" },
}
