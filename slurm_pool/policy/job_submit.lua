-- The pool policy of slurm-pool, for Slurm's job_submit/lua plugin (Lua 5.1 to 5.4).
--
-- This is the code only.  `slurm-pool render` writes job_submit.lua as the
-- pool's data (one table literal, SLURM_POOL, built from the pool spec for the
-- target Slurm release) followed by this file, unchanged.  It uses no modules
-- and does no I/O beyond slurm.log_* and reading the site's script (shared clusters).
--
-- Policies, all driven by the data:
--   routing       a job lands in its account's partition for the tier (QOS) it
--                 asks for, or the default tier; QOS and partition are both set;
--                 a tier, QOS or partition the account may not use is rejected.
--   GPU types     a GPU or MIG type the pool (or the job's partition) lacks is
--                 rejected; a single whole-GPU job that declares a small memory
--                 need (--gpu-mem) moves to the smallest MIG type that fits.
--   checkpoint    preemptible tiers require requeue plus --checkpoint/--signal
--                 ("reject") or turn requeue on and warn ("add_requeue").
--   limits        GPUs per job; a time limit where the tier requires one.
--   modify        a job cannot be moved into a tier its account may not use.
--   several QOS   from Slurm 24.11 (slurm.multiple_qos in the data) a job may
--                 list several tiers (--qos=a,b); each tier's rules apply.
--   guarantees    a floating project's job in the guarantee tier goes to the
--                 floating partition with the project's own QOS while its GPUs
--                 fit the guarantee (counting the project's pending and running
--                 jobs in that QOS from slurm.jobs); beyond it, to the overflow
--                 tier, with a message, and (when the guarantee was full) the
--                 admin comment "slurm-pool: overflow of <QOS>" that `slurm-pool
--                 guarantees reconcile` moves it back by.  Another project's
--                 guarantee QOS, or the floating partition, is refused; an update
--                 moves a job into its guarantee only while it fits (else it is refused).
--
-- The account of a job submitted without --account is, in order: the user's
-- default account in the accounting database when it is a pool project, else
-- the first project listing the user in the spec.  A job whose project cannot
-- be told is rejected, except root's (administrative jobs pass unpoliced).
--
-- Any Lua error inside the policy is caught, logged, and then handled by
-- pool.on_error.  With enabled = false (policy.job_submit: false) every job
-- passes unchanged.
--
-- In a shared cluster (scope.shared: the site runs its own partitions and
-- accounts beside the pool) a job is the pool's by what it names that the
-- pool owns: a pool partition, a pool QOS (a tier or a guarantee QOS), or a
-- pool project as --account (an adopted account, scope.adopted_accounts, only
-- off the site's partitions); a job that names no partition is also the
-- pool's when the user's default account is a pool project (it is routed).
-- Every other job passes untouched, whatever its names look like.  A pool job
-- that names a site partition is refused, with the pool partitions to use: a
-- pool QOS (or a pool project's association, which offers only the pool's
-- QOS) on the site's partitions would skip the pool's rules and preempt the
-- pool's jobs there.  A refusal names the way to an accepted job: the
-- user's own projects (scope.user_projects) where the account is the issue.
--
-- The site's own script (scope.site_script) is loaded into its own
-- environment and its slurm_job_submit / slurm_job_modify run before the
-- pool's rules (site_order "before": its rejection stands) or after them (on
-- the routed job).  It is kept as Slurm's job_submit/lua keeps its own
-- script (src/lua/slurm_lua.c, slurm_lua_loadscript): read again at every
-- call and loaded anew when its text changed (Lua has no stat(), so the text
-- stands in for Slurm's mtime); a version that fails to load (syntax error,
-- error or a return code other than SUCCESS while loading, slurm_job_submit
-- or slurm_job_modify missing, the file gone) is logged with slurm.log_error,
-- naming the file, at every call, and the functions that loaded last stay in
-- use.  When the site's script has never loaded in this Lua state, the
-- pool's script fails to load with the site's error, which is what Slurm
-- does with the site's broken script alone: at slurmctld's start it stops
-- ("failed to initialize job_submit plugin", src/slurmctld/controller.c);
-- on a reload of job_submit.lua it keeps the previous state ("using
-- previous script"), here the pool's previous rules with their site functions.

---------------------------------------------------------------------------
-- Data (rendered from the spec in front of this file)
---------------------------------------------------------------------------

if type(SLURM_POOL) ~= "table" then
	error("slurm-pool: job_submit.lua carries no SLURM_POOL data table; write it with `slurm-pool render`")
end

local ENABLED = SLURM_POOL.enabled
local POOL = SLURM_POOL.pool	-- cluster, on_error, admin_contact, default_tier, right_size_mig, checkpoint_*
local SLURM = SLURM_POOL.slurm	-- the target Slurm release and what it supports
-- tier (QOS) -> max_gpus, require_time, checkpoint, gpu_shards
local TIERS = SLURM_POOL.tiers
-- partition -> its tier, the accounts it admits (nil: all), its MaxTime and GPU types
local PARTITIONS = SLURM_POOL.partitions
-- project (account) -> usable tiers in order, default tier, tier -> partition
local PROJECTS = SLURM_POOL.projects
local PROJECT_ORDER = SLURM_POOL.project_order
-- user -> project, for jobs submitted without --account
local USER_PROJECT = SLURM_POOL.user_project
-- GRES type of GPU -> memory (MiB), MIG or whole, and the whole-GPU types it is part of
local GPU_TYPES = SLURM_POOL.gpu_types
local GPU_TYPE_ORDER = SLURM_POOL.gpu_type_order
local MIG_BY_SIZE = SLURM_POOL.mig_by_size
-- shared: the cluster also runs the site's own work (the spec's coexist);
-- site_script, site_order: the site's own job_submit.lua, run before or after
local SCOPE = SLURM_POOL.scope or {}
-- floating guarantees: the floating partition, and guarantee QOS -> its project
-- (each floating project's own rule is PROJECTS[name].guarantee)
local GUARANTEES = SLURM_POOL.guarantees or { qos = {} }
-- user -> every project listing the user (shared clusters; else the first one)
local USER_PROJECTS = SCOPE.user_projects or {}
-- accounts the spec adopted from the site: their jobs on the site's partitions stay the site's
local ADOPTED = SCOPE.adopted_accounts or {}

---------------------------------------------------------------------------
-- Slurm constants.  22.05 exposes only some ESLURM_* names to Lua; the
-- fallbacks are the values of slurm/slurm_errno.h.
---------------------------------------------------------------------------

local function const(name, fallback)
	local v = nil
	if type(slurm) == "table" then v = slurm[name] end
	if type(v) == "number" then return v end
	return fallback
end

local SUCCESS = const("SUCCESS", 0)
local ERROR = const("ERROR", -1)
local E_ACCESS = const("ESLURM_ACCESS_DENIED", 2002)
local E_ACCOUNT = const("ESLURM_INVALID_ACCOUNT", 2045)
local E_QOS = const("ESLURM_INVALID_QOS", 2066)
local E_PARTITION = const("ESLURM_INVALID_PARTITION_NAME", 2000)
local E_GRES = const("ESLURM_INVALID_GRES", 2072)
local E_LIMIT = const("ESLURM_ACCOUNTING_POLICY", 2050)
local E_NO_TIME = const("ESLURM_MISSING_TIME_LIMIT", 8000)
local E_BAD_TIME = const("ESLURM_INVALID_TIME_LIMIT", 2051)
local NO_VAL = 4294967294	-- an unset uint32 field
local INFINITE = 4294967295
local NO_VAL16 = 65534	-- an unset uint16 field
local TRES_FIELDS = { "tres_per_job", "tres_per_node", "tres_per_task", "tres_per_socket" }
local PREFIX = "slurm-pool: "

---------------------------------------------------------------------------
-- Helpers
---------------------------------------------------------------------------

-- Log through slurm.log_*; the message is an argument, never a format.
local function log(fn_name, msg)
	local fn = nil
	if type(slurm) == "table" then fn = slurm[fn_name] end
	if type(fn) == "function" then pcall(fn, "%s", msg) end
end

local function str(v)
	if type(v) == "string" and v ~= "" then return v end
	return nil
end

local function num(v)
	if type(v) == "number" and v == v then return v end
	return nil
end

-- A count that is set: at least 1 and below the field's "unset" value.
local function count(v, unset)
	v = num(v)
	if v and v >= 1 and v < unset then return math.floor(v) end
	return nil
end

-- User input quoted in a message: short, printable.  Besides C0 controls and DEL
-- (%c), the UTF-8 of C1 controls, line and paragraph separators, bidi controls
-- and the BOM become "?" (the characters slurm_pool.text calls controls).
local function clip(s)
	s = string.gsub(tostring(s), "\194[\128-\159]", "?")
	s = string.gsub(s, "\226\128[\142\143\168-\174]", "?")
	s = string.gsub(s, "\226\129[\166-\169]", "?")
	s = string.gsub(s, "\239\187\191", "?")
	s = string.gsub(s, "%c", "?")
	if #s > 64 then s = string.sub(s, 1, 61) .. "..." end
	return "'" .. s .. "'"
end

local function split(s)
	local out = {}
	for item in string.gmatch(s, "[^,]+") do out[#out + 1] = item end
	return out
end

local function join(list)
	if #list == 0 then return "none" end
	return table.concat(list, ", ")
end

-- A number as users write it: "80", not "80.0" (Lua 5.3+ keeps floats apart
-- from integers, and Slurm hands numbers over as floats).
local function int_text(v)
	if type(v) == "number" and v == math.floor(v) and v > -2^53 and v < 2^53 then
		return string.format("%d", v)
	end
	return tostring(v)
end

local function gb(mb)
	local v = mb / 1024
	if v == math.floor(v) then return int_text(v) .. " GB" end
	return string.format("%.1f GB", v)
end

local function may_use(account)
	local proj = PROJECTS[account]
	local out = {}
	for _, t in ipairs(proj.tiers) do out[#out + 1] = t .. " (partition " .. proj.route[t] .. ")" end
	return "Tiers account '" .. account .. "' may use: " .. join(out) .. "."
end

local function types_text(names)
	local out = {}
	for _, n in ipairs(names) do
		local g = GPU_TYPES[n]
		if g.mig then out[#out + 1] = n .. " (MIG, " .. gb(g.mem_mb) .. ")"
		else out[#out + 1] = n .. " (" .. gb(g.mem_mb) .. ")" end
	end
	return join(out)
end

local function new_decision()
	return { rc = SUCCESS, errors = {}, warnings = {}, set = {} }
end

local function reject(d, code, msg)
	if #d.errors == 0 then d.rc = code end
	d.errors[#d.errors + 1] = PREFIX .. msg
end

local function warn(d, msg)
	d.warnings[#d.warnings + 1] = PREFIX .. msg
end

local function set(d, field, value)
	d.set[#d.set + 1] = { field, value }
end

-- SLURM_POOL_* variables the SPANK plugin put in the job control environment.
-- Slurm hands them over as a table indexed from 0, with or without SPANK_.
local function spank_env(job_desc)
	local env, t = {}, job_desc.spank_job_env
	if type(t) ~= "table" then return env end
	for _, entry in pairs(t) do
		if type(entry) == "string" then
			local k, v = string.match(entry, "^([%w_]+)=(.*)$")
			if k then
				if string.sub(k, 1, 6) == "SPANK_" then k = string.sub(k, 7) end
				if string.sub(k, 1, 11) == "SLURM_POOL_" then env[k] = v end
			end
		end
	end
	return env
end

---------------------------------------------------------------------------
-- Routing
---------------------------------------------------------------------------

local function default_tier(proj)
	if proj.default_tier then return proj.default_tier end
	if POOL.default_tier and proj.route[POOL.default_tier] then return POOL.default_tier end
	return proj.tiers[1]
end

local function unknown_partition(p, account)
	if SCOPE.shared then
		return "partition " .. clip(p) .. " is not one of the pool's; a job may not mix the pool's partitions " ..
			"with the site's. " .. may_use(account)
	end
	return "partition " .. clip(p) .. " does not exist. " .. may_use(account)
end

-- The tier and partitions of a request, or nil, nil, error code, message.
local function resolve(account, qos, part_str)
	local proj = PROJECTS[account]
	local parts = {}
	if part_str then parts = split(part_str) end
	if qos and not TIERS[qos] then
		return nil, nil, E_QOS, "QOS " .. clip(qos) .. " is not a tier of this pool. " .. may_use(account)
	end
	for _, p in ipairs(parts) do
		if not PARTITIONS[p] then
			return nil, nil, E_PARTITION, unknown_partition(p, account)
		end
	end
	local tier = qos
	if not tier and #parts > 0 then
		tier = PARTITIONS[parts[1]].tier
		for _, p in ipairs(parts) do
			if PARTITIONS[p].tier ~= tier then
				return nil, nil, E_PARTITION, "partitions '" .. parts[1] .. "' (tier " .. tier .. ") and '" .. p ..
					"' (tier " .. PARTITIONS[p].tier .. ") belong to different tiers; submit to one tier at a time. " ..
					may_use(account)
			end
		end
	end
	if not tier then tier = default_tier(proj) end
	if not tier then
		return nil, nil, E_ACCESS, "account '" .. account .. "' has no tier it may use; ask " .. POOL.admin_contact .. "."
	end
	if not proj.route[tier] then
		return nil, nil, E_ACCESS, "account '" .. account .. "' may not use tier '" .. tier .. "'. " .. may_use(account)
	end
	for _, p in ipairs(parts) do
		local rule = PARTITIONS[p]
		if rule.tier ~= tier then
			return nil, nil, E_QOS, "partition '" .. p .. "' belongs to tier '" .. rule.tier ..
				"', not to the requested QOS '" ..
				tier .. "'. " .. may_use(account)
		end
		if rule.accounts and not rule.accounts[account] then
			return nil, nil, E_ACCESS, "account '" .. account .. "' may not use partition '" .. p .. "'. " .. may_use(account)
		end
	end
	return tier, parts
end

-- Every tier a request names, each with its partitions ({ tier = , parts = }),
-- or nil, error code, message.  From Slurm 24.11 a job may list several QOS
-- (--qos=a,b): each must be a tier its account may use, and each tier's rules
-- apply; a listed partition must belong to one of them.
local function resolve_all(account, qos, part_str)
	if not qos or not string.find(qos, ",", 1, true) then
		local tier, parts, code, msg = resolve(account, qos, part_str)
		if not tier then return nil, code, msg end
		return { { tier = tier, parts = parts } }
	end
	if not SLURM.multiple_qos then
		return nil, E_QOS, "QOS " .. clip(qos) .. " lists several QOS, but this Slurm takes one per job. " ..
			may_use(account)
	end
	local given = {}
	if part_str then given = split(part_str) end
	for _, p in ipairs(given) do
		if not PARTITIONS[p] then
			return nil, E_PARTITION, unknown_partition(p, account)
		end
	end
	local routes, named = {}, {}
	for _, q in ipairs(split(qos)) do
		if not named[q] then
			named[q] = true
			local mine = {}
			for _, p in ipairs(given) do
				if PARTITIONS[p].tier == q then mine[#mine + 1] = p end
			end
			local tier, parts, code, msg = resolve(account, q, (#mine > 0) and table.concat(mine, ",") or nil)
			if not tier then return nil, code, msg end
			routes[#routes + 1] = { tier = tier, parts = parts }
		end
	end
	for _, p in ipairs(given) do
		if not named[PARTITIONS[p].tier] then
			return nil, E_QOS, "partition '" .. p .. "' belongs to tier '" .. PARTITIONS[p].tier ..
				"', which is not among the requested QOS " .. clip(qos) .. ". " .. may_use(account)
		end
	end
	return routes
end

-- The project of a submission and whether it was filled in here.
local function job_account(job_desc)
	local account = str(job_desc.account)
	if account then return account, false end
	local dflt = str(job_desc.default_account)
	if dflt and PROJECTS[dflt] then return dflt, true end
	local user = str(job_desc.user_name)
	if user and USER_PROJECT[user] then return USER_PROJECT[user], true end
	return nil, false
end

---------------------------------------------------------------------------
-- GPUs
---------------------------------------------------------------------------

-- GPU entries of one tres_per_* value: "gres:gpu:2", "gres:gpu:TYPE:1",
-- "gres:gpu" (22.05), or "gres/gpu:..." (later releases).
local function parse_gpus(field, value)
	local out = {}
	for item in string.gmatch(value, "[^,]+") do
		local prefix, rest = string.match(item, "^(gres[:/]gpu)(.*)$")
		if prefix and (rest == "" or string.sub(rest, 1, 1) == ":") then
			local gtype, n = nil, 1
			local a, b = string.match(rest, "^:([^:]+):([^:]+)$")
			if a then
				gtype, n = a, tonumber(b) or 1
			else
				local c = string.match(rest, "^:([^:]+)$")
				if c and string.match(c, "^%d+$") then n = tonumber(c)
				elseif c then gtype = c end
			end
			if n ~= n or n < 0 then n = 1 end
			if n > 0 then
				out[#out + 1] = { field = field, raw = item, prefix = prefix, type = gtype, count = math.floor(n) }
			end
		end
	end
	return out
end

-- Nodes, tasks and sockets of the job, for turning per-X counts into a total.
local function job_shape(job_desc)
	local nodes = count(job_desc.min_nodes, NO_VAL) or 1
	local maxn = count(job_desc.max_nodes, NO_VAL)
	if maxn and maxn > nodes then nodes = maxn end
	local tasks = count(job_desc.num_tasks, NO_VAL)
	if not tasks then
		local per_node = count(job_desc.ntasks_per_node, NO_VAL16)
		tasks = (per_node or 1) * nodes
	end
	local sockets = (count(job_desc.sockets_per_node, NO_VAL16) or 1) * nodes
	return { tres_per_job = 1, tres_per_node = nodes, tres_per_task = tasks, tres_per_socket = sockets }
end

local function available(parts)
	local avail, any = {}, false
	for _, p in ipairs(parts) do
		for _, t in ipairs(PARTITIONS[p].gpu_types) do avail[t] = true; any = true end
	end
	return avail, any
end

local function in_all(parts, gtype)
	for _, p in ipairs(parts) do
		local found = false
		for _, t in ipairs(PARTITIONS[p].gpu_types) do
			if t == gtype then found = true; break end
		end
		if not found then return false end
	end
	return true
end

-- The job's GPU entries, its total GPU count and its count per GPU type ("" for
-- no type), best effort: the largest of the per-job, per-node x nodes, per-task
-- x tasks, per-socket x sockets totals.
local function gpu_request(job_desc)
	local shape = job_shape(job_desc)
	local entries, total, by_type = {}, 0, {}
	for _, f in ipairs(TRES_FIELDS) do
		local v = str(job_desc[f])
		if v then
			local sum, mine = 0, {}
			for _, e in ipairs(parse_gpus(f, v)) do
				entries[#entries + 1] = e
				sum = sum + e.count
				mine[e.type or ""] = (mine[e.type or ""] or 0) + e.count * shape[f]
			end
			if sum * shape[f] > total then total = sum * shape[f] end
			for k, n in pairs(mine) do
				if n > (by_type[k] or 0) then by_type[k] = n end
			end
		end
	end
	return entries, total, by_type
end

-- Returns the job's GPU entries and its total GPU count (as gpu_request).
local function check_gpus(d, job_desc, tier, parts)
	local entries, total = gpu_request(job_desc)
	if #entries == 0 then return entries, 0 end
	local avail, any = available(parts)
	local where = "partition '" .. table.concat(parts, ",") .. "'"
	for _, e in ipairs(entries) do
		if e.type and not GPU_TYPES[e.type] then
			reject(d, E_GRES, "GPU type " .. clip(e.type) .. " does not exist in this pool. Available types: " ..
				types_text(GPU_TYPE_ORDER) .. ".")
			return entries, total
		elseif e.type and not avail[e.type] then
			local names = {}
			for _, n in ipairs(GPU_TYPE_ORDER) do if avail[n] then names[#names + 1] = n end end
			reject(d, E_GRES, "GPU type '" .. e.type .. "' is not available in " .. where .. " (tier " .. tier ..
				"). Types there: " .. types_text(names) .. ".")
			return entries, total
		elseif not any then
			reject(d, E_GRES, where .. " (tier " .. tier .. ") has no GPUs. Available types in the pool: " ..
				types_text(GPU_TYPE_ORDER) .. ".")
			return entries, total
		end
	end
	local max = TIERS[tier].max_gpus
	if max and total > max then
		reject(d, E_LIMIT, "tier '" .. tier .. "' allows at most " .. int_text(max) ..
			" GPU(s) per job; this job asks for " ..
			string.format("%.0f", total) .. ".")
	end
	return entries, total
end

-- A job asking for one whole GPU that declares --gpu-mem small enough for a
-- MIG slice gets the smallest MIG type that fits and exists in all of its
-- partitions (of the same GPU model when it named a whole-GPU type).
local function right_size(d, job_desc, entries, total, parts, env)
	if not POOL.right_size_mig or #MIG_BY_SIZE == 0 then return end
	local need = tonumber(env.SLURM_POOL_GPU_MEM_MB or "")
	if not need or need ~= need or need <= 0 then return end
	if #entries ~= 1 or total ~= 1 or entries[1].count ~= 1 then return end
	local e = entries[1]
	local parent = nil
	if e.type then
		local g = GPU_TYPES[e.type]
		if not g or g.mig then return end
		parent = e.type
	end
	for _, name in ipairs(MIG_BY_SIZE) do
		local g = GPU_TYPES[name]
		if g.mem_mb >= need and (not parent or g.parents[parent]) and in_all(parts, name) then
			local items = split(job_desc[e.field])
			for i, item in ipairs(items) do
				if item == e.raw then items[i] = e.prefix .. ":" .. name .. ":1"; break end
			end
			set(d, e.field, table.concat(items, ","))
			warn(d, "--gpu-mem=" .. string.format("%.0f", need) .. "M fits a MIG slice, so this job gets one " ..
				name .. " (" .. gb(g.mem_mb) .. ") instead of a whole GPU. To keep a whole GPU, submit without --gpu-mem.")
			return
		end
	end
end

-- In a tier with gpu_shards, a job asking for one GPU of no type gets that
-- many shards of a shared GPU instead (Slurm's gres/shard; a GPU goes to
-- shards or to a whole-GPU job, never both).  --gpus lives in tres_per_job,
-- where Slurm takes no shared GRES, so it moves to tres_per_node.  Returns
-- true when the job was changed.
local function to_shards(d, job_desc, entries, total, tier)
	local n = TIERS[tier].gpu_shards
	if not n or #entries ~= 1 or total ~= 1 or entries[1].count ~= 1 or entries[1].type then return false end
	local e = entries[1]
	if e.field ~= "tres_per_node" and e.field ~= "tres_per_job" then return false end
	if e.field == "tres_per_job" and (count(job_desc.min_nodes, NO_VAL) or 1) > 1 then return false end
	local shard = string.sub(e.prefix, 1, 5) .. "shard:" .. int_text(n)
	local items = {}
	for _, item in ipairs(split(job_desc[e.field])) do
		if item ~= e.raw then items[#items + 1] = item end
	end
	local node_items = items
	if e.field == "tres_per_job" then
		set(d, "tres_per_job", table.concat(items, ","))
		node_items = split(str(job_desc.tres_per_node) or "")
	end
	node_items[#node_items + 1] = shard
	set(d, "tres_per_node", table.concat(node_items, ","))
	warn(d, "tier '" .. tier .. "' shares GPUs: this job gets " .. int_text(n) .. " shard(s) of one GPU instead of " ..
		"a whole GPU. To get a whole GPU, ask for a GPU type (--gres=gpu:TYPE:1).")
	return true
end

---------------------------------------------------------------------------
-- Time limit and the checkpoint contract
---------------------------------------------------------------------------

local function check_time(d, tier, parts, time_limit, modify)
	if not TIERS[tier].require_time then return end
	local tl = num(time_limit)
	local unset = tl == nil or tl == NO_VAL
	if modify and unset then return end
	local limit = ""
	local p = PARTITIONS[parts[1] or ""]
	if p and p.max_time ~= "UNLIMITED" and p.max_time ~= "INFINITE" then
		limit = " (partition '" .. parts[1] .. "' allows at most " .. p.max_time .. ")"
	end
	if unset then
		reject(d, E_NO_TIME, "tier '" .. tier .. "' requires a time limit: submit with --time=[days-]hours:minutes:seconds" ..
			limit .. ".")
	elseif tl == 0 or tl >= INFINITE then
		reject(d, E_BAD_TIME, "tier '" .. tier ..
			"' requires a finite time limit, not UNLIMITED: use --time=[days-]hours:minutes:seconds" ..
			limit .. ".")
	end
end

-- "--signal" (or an unambiguous abbreviation, at least "--sig") in a line.
local function has_signal_option(line)
	for word in string.gmatch(line, "%-%-(%a+)") do
		if #word >= 3 and string.sub("signal", 1, #word) == word then return true end
	end
	return false
end

-- Does the batch script's #SBATCH header ask for --signal?  Slurm reads
-- #SBATCH lines up to the first line that is neither blank nor a comment.
local function script_signal(script)
	if not script then return false end
	local n = 0
	for line in string.gmatch(string.sub(script, 1, 65536), "[^\n]*") do
		n = n + 1
		if n > 1 then
			if string.sub(line, 1, 7) == "#SBATCH" then
				if has_signal_option(line) then return true end
			elseif not string.find(line, "^%s*$") and not string.find(line, "^%s*#") then
				return false
			end
		end
	end
	return false
end

local function declares_checkpoint(job_desc, env)
	if env.SLURM_POOL_CHECKPOINT == "1" or str(env.SLURM_POOL_CHECKPOINT_SIGNAL) or env.SLURM_POOL_SIGNAL == "1" then
		return true
	end
	return script_signal(str(job_desc.script))
end

local function other_tiers(account)
	local proj, out = PROJECTS[account], {}
	for _, t in ipairs(proj.tiers) do
		if TIERS[t].checkpoint == "none" then out[#out + 1] = t end
	end
	if #out == 0 then return "" end
	return " Tiers without this requirement that account '" .. account .. "' may use: " .. join(out) .. "."
end

-- requeue: the job's requeue field (0 off, 1 on, other: unset);
-- declared: whether it declares checkpointing.
local function check_checkpoint(d, tier, requeue, declared, account)
	local mode = TIERS[tier].checkpoint
	if mode ~= "reject" and mode ~= "add_requeue" then return end
	if mode == "reject" then
		local missing = {}
		if requeue == 0 then missing[#missing + 1] = "its requeue is turned off (--no-requeue)" end
		if not declared then missing[#missing + 1] = "it declares no checkpointing" end
		if #missing > 0 then
			reject(d, E_ACCESS, "tier '" .. tier ..
				"' is preemptible: its jobs must be requeueable and checkpoint their work, and " ..
				table.concat(missing, " and ") .. ". To comply, submit with --checkpoint[=DIR] (or --checkpoint-signal=SIG, " ..
				"or --signal=[B:]SIG[@SECONDS]) and without --no-requeue: when the job is preempted it receives SIG" ..
				POOL.checkpoint_signal .. " " .. POOL.warn_seconds .. " s before it is stopped, saves its state and is requeued." ..
				other_tiers(account))
			return
		end
	else
		if requeue == 0 then
			warn(d, "tier '" .. tier ..
				"' is preemptible: --no-requeue was overridden, so this job is requeued if it is preempted.")
		end
		if not declared then
			warn(d, "tier '" .. tier .. "' is preemptible and this job declares no checkpointing (--checkpoint[=DIR] or " ..
				"--signal): if it is preempted it starts again from the beginning.")
		end
	end
	if requeue ~= 1 then set(d, "requeue", 1) end
end

---------------------------------------------------------------------------
-- Floating guarantees
---------------------------------------------------------------------------

-- Base states (job_state % 256) of a job that holds or waits for GPUs.
local HOLDS = { [0] = "pending", [1] = "running", [2] = "suspended" }
-- The TRES a job record was given (running) or asked for (pending); Slurm 22.05 to 26.05.
local ALLOC_TRES = { "tres_fmt_alloc_str", "tres_fmt_req_str" }
local REQ_TRES = { "tres_fmt_req_str" }
-- job_submit/lua rebuilds slurm.jobs (a new table) only once slurmctld's job list
-- changed in a later second than the last rebuild, so jobs submitted within the
-- same second are missing from it (a record's fields are read live, so an
-- update shows at once).  The GPUs this script sent into guarantees since the
-- table it last saw are added: project -> a count per entry of g.gpus.
local SENT = { jobs = nil, gpus = {} }

-- GPUs in a TRES string ("cpu=1,mem=1G,node=1,billing=1,gres/gpu=2,gres/gpu:h100=2"):
-- the total (nil: no gres/gpu in it) and the count per GPU type.
local function tres_gpus(s)
	local total, typed, sum = nil, {}, 0
	for item in string.gmatch(s, "[^,]+") do
		local name, n = string.match(item, "^gres/gpu([^=]*)=(%d+)$")
		if name == "" then
			total = tonumber(n)
		elseif name and string.sub(name, 1, 1) == ":" then
			typed[string.sub(name, 2)] = tonumber(n)
			sum = sum + tonumber(n)
		end
	end
	if not total and sum > 0 then total = sum end
	return total, typed
end

-- GPUs of a job record: its total and its count per GPU type, from its TRES
-- (what Slurm counts against GrpTRES), else from the GRES it asked for.
local function record_gpus(rec, running)
	local total, typed = nil, {}
	for _, f in ipairs(running and ALLOC_TRES or REQ_TRES) do
		local s = str(rec[f])
		if s then
			total, typed = tres_gpus(s)
			if total then break end
		end
	end
	if not total or next(typed) == nil then
		local _, t, by_type = gpu_request(rec)
		if not total then total = t end
		if next(typed) == nil then
			for k, n in pairs(by_type) do
				if k ~= "" then typed[k] = n end
			end
		end
	end
	return total, typed
end

-- GPUs the project holds or waits for in its guarantee QOS, one count per entry
-- of g.gpus, from slurmctld's job table (slurm.jobs); the job skip_id is left out.
-- A record with GPUs of no known type counts against every type (it may be any).
local function guarantee_use(account, g, skip_id)
	local used = {}
	for i in ipairs(g.gpus) do used[i] = 0 end
	local jobs = nil
	if type(slurm) == "table" then jobs = slurm.jobs end
	if type(jobs) ~= "table" then
		log("log_info", PREFIX .. "slurm.jobs is not available: the guarantee of " .. account .. " counts no job")
		return used
	end
	if SENT.jobs ~= jobs then SENT.jobs, SENT.gpus = jobs, {} end
	for i, n in ipairs(SENT.gpus[account] or {}) do used[i] = used[i] + n end
	for _, rec in pairs(jobs) do
		if type(rec) == "table" and rec.account == account and rec.qos == g.qos then
			local state = num(rec.job_state)
			local base = state and math.floor(state) % 256
			if base and HOLDS[base] and (not skip_id or num(rec.job_id) ~= skip_id) then
				local total, typed = record_gpus(rec, base ~= 0)
				local tasks = 1
				if base == 0 then tasks = count(rec.array_task_cnt, NO_VAL) or 1 end
				local untyped = next(typed) == nil
				for i, e in ipairs(g.gpus) do
					local n = total
					if e.type ~= "" and not untyped then n = typed[e.type] or 0 end
					used[i] = used[i] + n * tasks
				end
			end
		end
	end
	return used
end

-- Tasks of a job array request ("0-9", "1,3,5-7", "0-15:4", "0-9%2"); 1 when not an array.
local function array_tasks(s)
	s = str(s)
	if not s then return 1 end
	local n = 0
	for item in string.gmatch(string.match(s, "^[^%%]*"), "[^,]+") do
		local a, b, step = string.match(item, "^(%d+)%-(%d+):(%d+)$")
		if not a then
			a, b = string.match(item, "^(%d+)%-(%d+)$")
			step = "1"
		end
		if a then
			a, b, step = tonumber(a), tonumber(b), tonumber(step)
			if b >= a and step >= 1 then n = n + math.floor((b - a) / step) + 1 end
		elseif string.match(item, "^%d+$") then
			n = n + 1
		end
	end
	if n < 1 then return 1 end
	return n
end

-- What a submission asks of a guarantee: its GPUs in all its array tasks, per
-- type (as gpu_request), and its number of tasks.
local function submitted_gpus(job_desc)
	local _, total, by_type = gpu_request(job_desc)
	local tasks = array_tasks(job_desc.array_inx)
	for k, n in pairs(by_type) do by_type[k] = n * tasks end
	return total * tasks, by_type, tasks
end

-- Note GPUs sent into the guarantee, until slurm.jobs is rebuilt with their job.
local function note_sent(account, g, total, by_type)
	if SENT.jobs == nil then return end
	local sent = SENT.gpus[account] or {}
	for i, e in ipairs(g.gpus) do
		local want = total
		if e.type ~= "" then want = by_type[e.type] or 0 end
		sent[i] = (sent[i] or 0) + want
	end
	SENT.gpus[account] = sent
end

local function gpus_text(n, gtype)
	local what = " GPU"
	if gtype ~= "" then what = " GPU of type " .. gtype end
	if n ~= 1 then
		what = " GPUs"
		if gtype ~= "" then what = " GPUs of type " .. gtype end
	end
	return int_text(n) .. what
end

local function guarantee_text(g)
	local out = {}
	for _, e in ipairs(g.gpus) do out[#out + 1] = gpus_text(e.count, e.type) end
	return table.concat(out, " and ")
end

local function guarantee_types(g)
	local out = {}
	for _, e in ipairs(g.gpus) do out[#out + 1] = e.type end
	return table.concat(out, ", ")
end

-- Does a job asking for by_type (GPU type or "" -> count; total in all) fit the
-- project's guarantee?  Returns true, or false, why (a clause), a hint ("" or a
-- sentence) and whether it would fit once the guarantee frees (false: its GPU types
-- do not fit the guarantee, or it asks for more than the whole guarantee).
local function guarantee_fits(account, g, total, by_type, skip_id, tasks)
	if total <= 0 then return true end
	local typed_only = g.gpus[1].type ~= ""
	local here = {}
	for _, t in ipairs(PARTITIONS[g.partition].gpu_types) do here[t] = true end
	local asked = {}
	for t in pairs(by_type) do asked[#asked + 1] = t end
	table.sort(asked)
	for _, t in ipairs(asked) do
		if t ~= "" and GPU_TYPES[t] and not here[t] then
			return false, "partition '" .. g.partition .. "' of " .. account .. "'s guarantee has no GPUs of type " ..
				t .. ", which this job asks for", ""
		end
	end
	if typed_only then
		if (by_type[""] or 0) > 0 then
			return false, account .. "'s guarantee is for GPUs of type " .. guarantee_types(g) ..
				" only and this job names no GPU type",
				" To run in the guarantee, name the type: --gres=gpu:" .. g.gpus[1].type .. ":N."
		end
		local covered = {}
		for _, e in ipairs(g.gpus) do covered[e.type] = true end
		for _, t in ipairs(asked) do
			if not covered[t] then
				return false, account .. "'s guarantee is for GPUs of type " .. guarantee_types(g) ..
					", not for type " .. clip(t) .. " that this job asks for", ""
			end
		end
	end
	local used = guarantee_use(account, g, skip_id)
	local in_tasks = ""
	if tasks and tasks > 1 then in_tasks = " in " .. int_text(tasks) .. " array tasks" end
	for i, e in ipairs(g.gpus) do
		local want = total
		if e.type ~= "" then want = by_type[e.type] or 0 end
		if want > 0 and used[i] + want > e.count then
			local verb = " are"
			if used[i] == 1 then verb = " is" end
			return false, account .. "'s guarantee is " .. guarantee_text(g) .. " and " .. int_text(used[i]) .. verb ..
				" in use or queued; this job asks for " .. gpus_text(want, e.type) .. in_tasks, "", want <= e.count
		end
	end
	return true
end

-- Does a request for the guarantee tier go to the guarantee?  Only when it
-- names no partition, or the floating partition alone.
local function into_guarantee(g, parts)
	for _, p in ipairs(parts) do
		if p ~= g.partition then return false end
	end
	return true
end

-- The job's QOS list with the account's own guarantee QOS read as the guarantee
-- tier, or nil, error code, message when it names another project's guarantee
-- QOS or, without a guarantee of its own, the floating partition.
local function guarantee_names(account, qos, part_str)
	local g = PROJECTS[account].guarantee
	if part_str and GUARANTEES.partition and not g then
		for _, p in ipairs(split(part_str)) do
			if p == GUARANTEES.partition then
				local owners = {}
				for _, name in ipairs(PROJECT_ORDER) do
					if PROJECTS[name].guarantee then owners[#owners + 1] = name end
				end
				return nil, E_ACCESS, "partition '" .. p .. "' runs the floating guarantees of " .. join(owners) ..
					"; account '" .. account .. "' has no guarantee there. " .. may_use(account)
			end
		end
	end
	if not qos then return qos end
	local out = {}
	for _, q in ipairs(split(qos)) do
		local owner = GUARANTEES.qos[q]
		if owner and owner ~= account then
			return nil, E_QOS, "QOS '" .. q .. "' is the guarantee of project " .. owner .. "; account '" .. account ..
				"' may not use it. " .. may_use(account)
		end
		if owner then q = g.tier end
		out[#out + 1] = q
	end
	return table.concat(out, ",")
end

-- Send a floating project's routes for the guarantee tier into its guarantee
-- (qos = its own QOS, the floating partition) while the job fits, else to the
-- overflow tier with a message.  Routes get a field qos; returns the routes,
-- whether any was sent (false: nothing to do), and the guarantee QOS the job
-- overflowed from because it was full (nil: it did not, or it also asked for
-- the overflow tier itself).
local function route_guarantee(d, job_desc, account, routes)
	local g = PROJECTS[account].guarantee
	if not g then return routes, false end
	local out, sent, tiers, full_of = {}, false, {}, nil
	for _, r in ipairs(routes) do tiers[r.tier] = true end
	for _, r in ipairs(routes) do
		if r.tier == g.tier and into_guarantee(g, r.parts) then
			sent = true
			local total, by_type, tasks = submitted_gpus(job_desc)
			local fits, why, hint, full = guarantee_fits(account, g, total, by_type, nil, tasks)
			if fits then
				out[#out + 1] = { tier = r.tier, parts = { g.partition }, qos = g.qos, guarantee = true }
			elseif not g.overflow_partition then
				reject(d, E_LIMIT, why .. "; account '" .. account .. "' may not use the overflow tier '" .. g.overflow ..
					"', so this job cannot run now. " .. may_use(account))
				return routes, false
			else
				warn(d, why .. ", so it runs in tier '" .. g.overflow .. "' (partition '" .. g.overflow_partition ..
					"', preemptible) instead." .. hint)
				if not tiers[g.overflow] then
					out[#out + 1] = { tier = g.overflow, parts = { g.overflow_partition }, qos = g.overflow }
					if full then full_of = g.qos end
				end
			end
		else
			out[#out + 1] = r
		end
	end
	return out, sent, full_of
end

-- Tag a job that overflowed a full guarantee, so that `slurm-pool guarantees
-- reconcile` may move it back once the guarantee frees (never a job with an
-- admin comment already: someone else's).
local function tag_overflow(d, job_desc, routes, full_of)
	if full_of and #d.errors == 0 and #routes == 1 and not str(job_desc.admin_comment) then
		set(d, "admin_comment", PREFIX .. "overflow of " .. full_of)
	end
end

---------------------------------------------------------------------------
-- Submit and modify
---------------------------------------------------------------------------

local function any_in(list_str, rules)
	if not list_str then return false end
	for _, name in ipairs(split(list_str)) do
		if rules[name] then return true end
	end
	return false
end

local function is_pool_qos(q)
	return TIERS[q] ~= nil or GUARANTEES.qos[q] ~= nil
end

-- The names of a comma list that the pool owns (is_pool(name)), and the others.
local function owned(list_str, is_pool)
	local mine, other = {}, {}
	if list_str then
		for _, n in ipairs(split(list_str)) do
			if is_pool(n) then mine[#mine + 1] = n else other[#other + 1] = n end
		end
	end
	return mine, other
end

-- In a shared cluster: is this submission the pool's?  (Always, in a cluster the pool owns.)
local function pool_job(job_desc)
	if not SCOPE.shared then return true end
	local part = str(job_desc.partition)
	if any_in(part, PARTITIONS) or any_in(str(job_desc.qos), TIERS) or any_in(str(job_desc.qos), GUARANTEES.qos) then
		return true
	end
	local account = str(job_desc.account)
	if account and PROJECTS[account] then return not (part and ADOPTED[account]) end
	if part or account then return false end
	account = str(job_desc.default_account)
	return account ~= nil and PROJECTS[account] ~= nil
end

-- In a shared cluster: does this update touch a job of the pool, or move one into it?
local function pool_record(job_desc, job_rec)
	if not SCOPE.shared then return true end
	if any_in(str(job_desc.partition), PARTITIONS) or any_in(str(job_desc.qos), TIERS) then return true end
	if any_in(str(job_desc.qos), GUARANTEES.qos) then return true end
	local account = str(job_desc.account)
	if account and PROJECTS[account] and not ADOPTED[account] then return true end
	if type(job_rec) ~= "table" then return false end
	return any_in(str(job_rec.partition), PARTITIONS)
end

-- The way to an accepted job for a user whose account is not (or cannot be
-- told to be) a pool project: the user's own projects, else whom to ask.
local function account_way(user)
	local projs = user and USER_PROJECTS[user]
	if not projs and user and USER_PROJECT[user] then projs = { USER_PROJECT[user] } end
	if projs and #projs > 0 then
		local opts = {}
		for _, p in ipairs(projs) do opts[#opts + 1] = "-A " .. p end
		return "Submit with " .. table.concat(opts, " or ") .. " (user '" .. user .. "' is in the pool's project" ..
			(#projs > 1 and "s " or " ") .. join(projs) .. ")."
	end
	return "User " .. clip(user or "?") .. " is in none of the pool's projects (" .. join(PROJECT_ORDER) .. "): ask " ..
		POOL.admin_contact .. " to be added to one, or leave the pool's partitions and QOS out to run on the site's."
end

-- The pool partitions a tier or guarantee QOS runs in, sorted.
local function partitions_of(q)
	local out = {}
	if GUARANTEES.qos[q] then
		out[1] = GUARANTEES.partition
		return out
	end
	for name, rule in pairs(PARTITIONS) do
		if rule.tier == q then out[#out + 1] = name end
	end
	table.sort(out)
	return out
end

-- A pool job that names a site partition (shared clusters): the message that
-- refuses it, with the way to an accepted job; nil when it names none.
local function site_partition_refusal(part_str, qos_str, account)
	if not SCOPE.shared then return nil end
	local mine, site = owned(part_str, function(p) return PARTITIONS[p] ~= nil end)
	if #site == 0 then return nil end
	local where = "partition" .. (#site > 1 and "s " or " ") .. join(site) .. " " .. (#site > 1 and "are" or "is") ..
		" the site's, not the pool's"
	if #mine > 0 then
		return "partition " .. clip(site[1]) .. " is not one of the pool's; a job may not mix the pool's partitions " ..
			"with the site's. Submit to " .. join(mine) .. " alone, or to the site's partitions without the pool's."
	end
	local pool_qos = owned(qos_str, is_pool_qos)
	if #pool_qos > 0 then
		local q = pool_qos[1]
		return "QOS '" .. q .. "' is the pool's and runs only in its partitions (" .. join(partitions_of(q)) .. "); " ..
			where .. ". Submit with -p " .. join(partitions_of(q)) .. " (or without -p), or keep -p " ..
			site[1] .. " with one of the site's QOS."
	end
	if not (account and PROJECTS[account]) then
		return where .. "; a job there may not name the pool's partitions, QOS or projects."
	end
	local routes = {}
	for _, t in ipairs(PROJECTS[account].tiers) do routes[#routes + 1] = PROJECTS[account].route[t] end
	return "account '" .. account .. "' is a project of the pool: its jobs run only in the pool's partitions (" ..
		join(routes) .. "); " .. where .. ". Submit to one of those (or without -p), or to " .. site[1] ..
		" with a site account."
end

local function decide_submit(job_desc)
	local d = new_decision()
	if not pool_job(job_desc) then
		log("log_debug", PREFIX .. "job outside the pool's partitions, QOS and projects: passed untouched")
		return d
	end
	local account, filled = job_account(job_desc)
	local refusal = site_partition_refusal(str(job_desc.partition), str(job_desc.qos), account)
	if refusal then
		reject(d, E_PARTITION, refusal)
		return d
	end
	if not account or not PROJECTS[account] then
		if num(job_desc.user_id) == 0 then
			log("log_info", PREFIX .. "job of root outside the pool's projects: not policed")
			return d
		end
		local way = SCOPE.shared and (" " .. account_way(str(job_desc.user_name))) or ""
		if account then
			reject(d, E_ACCOUNT, "account " .. clip(account) .. " is not a project of this pool. Projects: " ..
				join(PROJECT_ORDER) .. "." .. way)
		else
			reject(d, E_ACCOUNT, "cannot tell which project this job belongs to: submit with --account=PROJECT " ..
				"(projects: " .. join(PROJECT_ORDER) .. ")." .. way)
		end
		return d
	end
	if filled then set(d, "account", account) end
	local qos = str(job_desc.qos)
	local asked, code, msg = guarantee_names(account, qos, str(job_desc.partition))
	if code then
		reject(d, code, msg)
		return d
	end
	local routes, sent, full_of
	routes, code, msg = resolve_all(account, asked, str(job_desc.partition))
	if not routes then
		reject(d, code, msg)
		return d
	end
	routes, sent, full_of = route_guarantee(d, job_desc, account, routes)
	if #d.errors > 0 then return d end
	local all_parts, defaulted = {}, false
	for _, r in ipairs(routes) do
		if #r.parts == 0 then
			r.parts = { PROJECTS[account].route[r.tier] }
			defaulted = true
		end
		for _, p in ipairs(r.parts) do all_parts[#all_parts + 1] = p end
	end
	if sent then
		local names = {}
		for _, r in ipairs(routes) do names[#names + 1] = r.qos or r.tier end
		local part_text, qos_text = table.concat(all_parts, ","), table.concat(names, ",")
		if part_text ~= str(job_desc.partition) then set(d, "partition", part_text) end
		if qos_text ~= qos then set(d, "qos", qos_text) end
	else
		if defaulted then set(d, "partition", table.concat(all_parts, ",")) end
		if #routes == 1 and qos ~= routes[1].tier then set(d, "qos", routes[1].tier) end
	end
	local env = spank_env(job_desc)
	local declared = declares_checkpoint(job_desc, env)
	local entries, total
	for _, r in ipairs(routes) do
		entries, total = check_gpus(d, job_desc, r.tier, r.parts)
		check_time(d, r.tier, r.parts, job_desc.time_limit, false)
		check_checkpoint(d, r.tier, num(job_desc.requeue), declared, account)
	end
	-- A job in a guarantee keeps the GPUs it was counted for: no shards, no MIG right-sizing.
	if #d.errors == 0 and #routes == 1 and not routes[1].guarantee and
		not to_shards(d, job_desc, entries, total, routes[1].tier) then
		right_size(d, job_desc, entries, total, routes[1].parts, env)
	end
	for _, r in ipairs(routes) do
		if r.guarantee and #d.errors == 0 then
			local n, by_type = submitted_gpus(job_desc)
			note_sent(account, PROJECTS[account].guarantee, n, by_type)
		end
	end
	tag_overflow(d, job_desc, routes, full_of)
	return d
end

-- The tier a job is in now: its QOS when that is a tier, else its partition's.
local function record_tier(job_rec)
	local qos = str(job_rec.qos)
	if qos and TIERS[qos] then return qos end
	local part = str(job_rec.partition)
	if part then
		local rule = PARTITIONS[split(part)[1] or ""]
		if rule then return rule.tier end
	end
	return nil
end

-- An update may not move a job into a tier its account may not use, nor
-- around the limits and the checkpoint contract of the tier it ends up in.
-- Messages to the user are dropped by 22.05 on modify; slurmctld's log has them.
local function decide_modify(job_desc, job_rec)
	local d = new_decision()
	if not pool_record(job_desc, job_rec) then return d end
	local new_account, new_qos, new_part = str(job_desc.account), str(job_desc.qos), str(job_desc.partition)
	local tl = num(job_desc.time_limit)
	local new_time = tl ~= nil and tl ~= NO_VAL
	local requeue = num(job_desc.requeue)
	local moving = new_account or new_qos or new_part
	if not (moving or new_time or requeue == 0) then return d end
	if type(job_rec) ~= "table" then job_rec = {} end
	local account = new_account or str(job_rec.account)
	if not account or not PROJECTS[account] then
		-- In a shared cluster, pool_record said the update moves the job into the pool.
		if new_account or (SCOPE.shared and account) then
			local way = SCOPE.shared and (" " .. account_way(str(job_rec.user_name))) or ""
			reject(d, E_ACCOUNT, "account " .. clip(account) .. " is not a project of this pool. Projects: " ..
				join(PROJECT_ORDER) .. "." .. way)
		end
		return d	-- a job outside the pool's projects is not policed
	end
	local refusal = site_partition_refusal(new_part or str(job_rec.partition), new_qos or str(job_rec.qos), account)
	if refusal then
		reject(d, E_PARTITION, refusal)
		return d
	end
	local old_tier, old_qos = record_tier(job_rec), str(job_rec.qos)
	local qos, part_str = new_qos, new_part
	if qos or part_str then
		local code, msg
		qos, code, msg = guarantee_names(account, qos, part_str)
		if code then
			reject(d, code, msg)
			return d
		end
	else
		qos, part_str = old_tier, str(job_rec.partition)
	end
	local tier, parts, code, msg = resolve(account, qos, part_str)
	if not tier then
		if moving then reject(d, code, msg) end
		return d
	end
	local g = PROJECTS[account].guarantee
	if g and tier == g.tier and (new_qos or new_part) and into_guarantee(g, new_part and parts or {}) then
		-- Into the guarantee only while the job fits it; it is not rerouted on an update.
		if old_qos ~= g.qos then
			local total, typed = record_gpus(job_rec, false)
			local tasks = count(job_rec.array_task_cnt, NO_VAL) or 1
			local by_type, sum = {}, 0
			for t, n in pairs(typed) do
				by_type[t] = n * tasks
				sum = sum + n
			end
			if total > sum then by_type[""] = (total - sum) * tasks end
			local fits, why, hint = guarantee_fits(account, g, total * tasks, by_type, num(job_rec.job_id), tasks)
			if not fits then
				reject(d, E_LIMIT, why .. ", so it cannot move into the guarantee; it stays where it is." .. hint)
				return d
			end
		end
		parts = { g.partition }
		if new_qos ~= g.qos and (new_qos or old_qos ~= g.qos) then set(d, "qos", g.qos) end
		if g.partition ~= str(job_rec.partition) and g.partition ~= new_part then set(d, "partition", g.partition) end
	elseif new_qos and not new_part then
		local route = PROJECTS[account].route[tier]
		parts = { route }
		if route ~= str(job_rec.partition) then set(d, "partition", route) end
	elseif new_part and not new_qos and tier ~= old_qos then
		set(d, "qos", tier)
	end
	if new_time then
		check_time(d, tier, parts, tl, true)
	elseif tier ~= old_tier then
		check_time(d, tier, parts, job_rec.time_limit, false)
	end
	if tier ~= old_tier or requeue == 0 then
		check_checkpoint(d, tier, requeue, declares_checkpoint(job_rec, spank_env(job_rec)), account)
	end
	return d
end

-- Reject with every message, or apply the planned changes and pass warnings on.
local function finish(d, job_desc, what)
	if #d.errors > 0 then
		local text = table.concat(d.errors, "\n")
		log("log_user", text)
		log("log_info", PREFIX .. "rejected " .. what .. ": " .. text)
		return d.rc
	end
	for _, kv in ipairs(d.set) do job_desc[kv[1]] = kv[2] end
	for _, w in ipairs(d.warnings) do log("log_user", w) end
	return SUCCESS
end

local function submit(job_desc, submit_uid)
	return finish(decide_submit(job_desc), job_desc, "submission from uid " .. int_text(submit_uid))
end

local function modify(job_desc, job_rec, modify_uid)
	local id = "?"
	if type(job_rec) == "table" then id = int_text(job_rec.job_id) end
	return finish(decide_modify(job_desc, job_rec), job_desc, "update of job " .. id .. " by uid " .. int_text(modify_uid))
end

-- No Lua error reaches slurmctld: it is logged and policy.on_error decides.
local function guarded(what, fn, a, b, c)
	local ok, rc = pcall(fn, a, b, c)
	if ok and type(rc) == "number" then return rc end
	local err = "returned a " .. type(rc) .. " instead of a return code"
	if not ok then
		local shown, text = pcall(tostring, rc)
		err = shown and text or "unprintable error"
	end
	log("log_error", PREFIX .. "internal error in " .. what .. ": " .. err)
	if POOL.on_error == "accept" then
		log("log_info", PREFIX .. "policy.on_error is accept: the request passes unchecked")
		return SUCCESS
	end
	log("log_user", PREFIX .. "the pool's job policy failed on this request, so it was rejected. Please contact " ..
		POOL.admin_contact .. ".")
	return ERROR
end

---------------------------------------------------------------------------
-- The site's own job_submit.lua (shared clusters)
---------------------------------------------------------------------------

-- The functions the site's script must define, as job_submit/lua requires
-- them (req_fxns in src/plugins/job_submit/lua/job_submit_lua.c).
local SITE_FUNCTIONS = { submit = "slurm_job_submit", modify = "slurm_job_modify" }

local function read_text(path)
	local f, err = io.open(path, "rb")
	if not f then return nil, tostring(err) end
	local text = f:read("*a")
	f:close()
	if type(text) ~= "string" then return nil, "cannot read " .. path end
	return text
end

-- Load the site's script from its text, as slurm_lua_loadscript does: compile
-- it, run it, take its return code, check its functions.  Its functions and
-- globals live in a table of their own (reading ours through _G), so neither
-- script can replace the other's entry points.  Returns the functions, or
-- nil and the error (naming the file).
local function load_site(path, text)
	local env = setmetatable({}, { __index = _G })
	local chunk, err
	if setfenv then	-- Lua 5.1
		chunk, err = loadstring(text, "@" .. path)
		if chunk then setfenv(chunk, env) end
	else
		chunk, err = load(text, "@" .. path, "t", env)
	end
	if not chunk then return nil, tostring(err) end
	local ok, rc = pcall(chunk)
	if not ok then
		local shown, msg = pcall(tostring, rc)
		return nil, path .. ": " .. (shown and msg or "unprintable error")
	end
	-- lua_tonumber: nothing, or no number, reads as 0 (SUCCESS).
	rc = tonumber(rc) or 0
	if rc ~= SUCCESS then return nil, path .. ": returned " .. int_text(rc) .. " on load" end
	local fns, missing = {}, {}
	for key, name in pairs(SITE_FUNCTIONS) do
		if type(rawget(env, name)) == "function" then fns[key] = rawget(env, name) else missing[#missing + 1] = name end
	end
	if #missing > 0 then
		table.sort(missing)
		return nil, path .. ": missing required function " .. join(missing)
	end
	return fns
end

-- The site's script as it last loaded (fns, the text they came from), and
-- the text and error of the last version that failed.
local SITE = { fns = nil, text = nil, bad_text = nil, bad_error = nil }

-- The site's functions now: loaded anew when the file's text changed, else
-- those that loaded last (nil, error when none ever did).
local function site_functions()
	local path = SCOPE.site_script
	local text, err = read_text(path)
	if text and text == SITE.text then return SITE.fns end
	if text and text == SITE.bad_text then
		err = SITE.bad_error
	elseif text then
		local fns
		fns, err = load_site(path, text)
		if fns then
			if SITE.fns then log("log_info", PREFIX .. "loaded the site's job_submit script " .. path .. " anew") end
			SITE.fns, SITE.text, SITE.bad_text, SITE.bad_error = fns, text, nil, nil
			return fns
		end
		SITE.bad_text, SITE.bad_error = text, err
	else
		err = "cannot read it: " .. err
		SITE.bad_text, SITE.bad_error = nil, nil
	end
	if SITE.fns then
		log("log_error", PREFIX .. "the site's job_submit script " .. path .. " failed to load (" .. err ..
			"), using the one that loaded before")
	end
	return SITE.fns, err
end

if SCOPE.site_script then
	local _, err = site_functions()
	if err then
		-- Slurm with the site's broken script alone would not load it either (see the head of this file).
		log("log_error", PREFIX .. "the site's job_submit script " .. SCOPE.site_script .. " failed to load (" ..
			err .. "); it never loaded, so the pool's job_submit.lua does not load either")
		error(PREFIX .. "the site's job_submit script " .. SCOPE.site_script .. " failed to load: " .. err, 0)
	end
end

-- The site's function's return code, as job_submit/lua takes it: a Lua error
-- in it rejects with the error; a return that is not a number passes.
local function run_site(what, fn, a, b, c, e)
	if not SCOPE.site_script then return SUCCESS end
	local fns = site_functions()
	local ok, rc = pcall(fns[fn], a, b, c, e)
	if ok then
		if tonumber(rc) then return tonumber(rc) end
		log("log_info", PREFIX .. "the site's " .. what .. " in " .. SCOPE.site_script .. ": non-numeric return code")
		return SUCCESS
	end
	local shown, msg = pcall(tostring, rc)
	msg = shown and msg or "unprintable error"
	log("log_error", PREFIX .. "the site's " .. what .. " in " .. SCOPE.site_script .. " failed: " .. msg)
	log("log_user", msg)
	return ERROR
end

local function chained(what, fn, pool_fn, a, b, c, e)
	if SCOPE.site_order ~= "after" then
		local rc = run_site(what, fn, a, b, c, e)
		if rc ~= SUCCESS then return rc end
	end
	if ENABLED then
		local rc = pool_fn()
		if rc ~= SUCCESS then return rc end
	end
	if SCOPE.site_order == "after" then return run_site(what, fn, a, b, c, e) end
	return SUCCESS
end

-- Slurm's entry points; the partition list goes only to the site's script
-- (without one, chained runs the pool's rules alone).
function slurm_job_submit(job_desc, part_list, submit_uid)
	return chained("slurm_job_submit", "submit", function()
		return guarded("slurm_job_submit", submit, job_desc, submit_uid)
	end, job_desc, part_list, submit_uid)
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	return chained("slurm_job_modify", "modify", function()
		return guarded("slurm_job_modify", modify, job_desc, job_rec, modify_uid)
	end, job_desc, job_rec, part_list, modify_uid)
end

return SUCCESS
