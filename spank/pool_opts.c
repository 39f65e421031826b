/*
 * pool_opts.c - option parsing and safe directory creation for the
 * slurm-pool SPANK plugin.  See pool_opts.h.
 */
#define _GNU_SOURCE
#include "pool_opts.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_BASE_DIR "/var/lib/slurm-pool/checkpoints"
#define QUOTE_MAX 48   /* characters of user input quoted in a message */

static const struct {
	const char *name;
	int num;
} catchable[] = {
	{ "HUP", SIGHUP }, { "INT", SIGINT }, { "QUIT", SIGQUIT },
	{ "USR1", SIGUSR1 }, { "USR2", SIGUSR2 }, { "ALRM", SIGALRM },
	{ "TERM", SIGTERM }, { "CONT", SIGCONT }, { "URG", SIGURG },
	{ "XCPU", SIGXCPU }, { "XFSZ", SIGXFSZ }, { "VTALRM", SIGVTALRM },
	{ "PROF", SIGPROF }, { "WINCH", SIGWINCH },
};

static int fail(char *err, size_t errlen, const char *fmt, ...)
	__attribute__ ((format (printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -1;
}

/* User input for a message: at most QUOTE_MAX printable characters. */
static const char *quote(const char *s, char *out, size_t outlen)
{
	size_t i, n = 0;

	if (outlen < 8)
		return "";
	out[n++] = '\'';
	for (i = 0; s && s[i] && n + 5 < outlen; i++) {
		if (i >= QUOTE_MAX) {
			memcpy(out + n, "...", 3);
			n += 3;
			break;
		}
		unsigned char c = (unsigned char) s[i];
		out[n++] = (c < 0x20 || c >= 0x7f) ? '?' : (char) c;
	}
	out[n++] = '\'';
	out[n] = '\0';
	return out;
}

void pool_conf_init(struct pool_conf *conf)
{
	memset(conf, 0, sizeof(*conf));
	snprintf(conf->base_dir, sizeof(conf->base_dir), "%s", DEFAULT_BASE_DIR);
	snprintf(conf->signal, sizeof(conf->signal), "USR1");
	conf->signum = SIGUSR1;
	conf->warn_seconds = 120;
}

int pool_conf_arg(struct pool_conf *conf, const char *arg, char *err, size_t errlen)
{
	char q[QUOTE_MAX + 10];
	char sub[POOL_ERR_MAX];

	if (!arg)
		return fail(err, errlen, "empty plugin argument");
	if (!strncmp(arg, "base_dir=", 9)) {
		const char *v = arg + 9;
		if (v[0] != '/')
			return fail(err, errlen, "base_dir=%s: not an absolute path",
				    quote(v, q, sizeof(q)));
		if (pool_check_dir(v, sub, sizeof(sub)) < 0)
			return fail(err, errlen, "base_dir: %s", sub);
		snprintf(conf->base_dir, sizeof(conf->base_dir), "%s", v);
		return 0;
	}
	if (!strncmp(arg, "signal=", 7)) {
		if (pool_parse_signal(arg + 7, conf->signal, sizeof(conf->signal),
				      &conf->signum, sub, sizeof(sub)) < 0)
			return fail(err, errlen, "signal: %s", sub);
		return 0;
	}
	if (!strncmp(arg, "warn_seconds=", 13)) {
		const char *v = arg + 13;
		char *end = NULL;
		unsigned long n;

		errno = 0;
		n = strtoul(v, &end, 10);
		if (!isdigit((unsigned char) v[0]) || errno || !end || *end ||
		    n > POOL_WARN_MAX)
			return fail(err, errlen, "warn_seconds=%s: not a number of seconds (0-%d)",
				    quote(v, q, sizeof(q)), POOL_WARN_MAX);
		conf->warn_seconds = (unsigned) n;
		return 0;
	}
	return fail(err, errlen, "unknown plugin argument %s (known: base_dir=, signal=, warn_seconds=)",
		    quote(arg, q, sizeof(q)));
}

int pool_parse_mem(const char *s, uint64_t *mb, char *err, size_t errlen)
{
	char q[QUOTE_MAX + 10];
	const char *p = s;
	uint64_t whole = 0, frac = 0, frac_div = 1, unit_kib, kib, mib;
	int digits = 0, fdigits = 0;

	if (!s || !*s)
		return fail(err, errlen, "an empty size (use e.g. 10G, 10240M or 10GB)");
	for (; *p >= '0' && *p <= '9'; p++) {
		if (++digits > 12)
			return fail(err, errlen, "%s is too large (at most 16T)", quote(s, q, sizeof(q)));
		whole = whole * 10 + (uint64_t) (*p - '0');
	}
	if (*p == '.') {
		for (p++; *p >= '0' && *p <= '9'; p++) {
			if (++fdigits > 6)
				return fail(err, errlen, "%s has too many decimals", quote(s, q, sizeof(q)));
			frac = frac * 10 + (uint64_t) (*p - '0');
			frac_div *= 10;
		}
		if (!fdigits)
			digits = 0;
	}
	if (!digits && !fdigits)
		return fail(err, errlen, "%s is not a size (use e.g. 10G, 10240M or 10GB)",
			    quote(s, q, sizeof(q)));
	switch (toupper((unsigned char) *p)) {
	case '\0':
	case 'M':
		unit_kib = 1024;
		break;
	case 'K':
		unit_kib = 1;
		break;
	case 'G':
		unit_kib = 1024 * 1024;
		break;
	case 'T':
		unit_kib = 1024 * 1024 * 1024;
		break;
	default:
		return fail(err, errlen, "%s has an unknown unit (use K, M, G or T, e.g. 10G, 10240M or 10GB)",
			    quote(s, q, sizeof(q)));
	}
	if (*p) {
		p++;
		if (!strcasecmp(p, "b") || !strcasecmp(p, "ib"))
			p += strlen(p);
		if (*p)
			return fail(err, errlen, "%s has an unknown unit (use K, M, G or T, e.g. 10G, 10240M or 10GB)",
				    quote(s, q, sizeof(q)));
	}
	if (whole > (POOL_MEM_MAX_MB * 1024) / unit_kib)
		return fail(err, errlen, "%s is too large (at most 16T)", quote(s, q, sizeof(q)));
	kib = whole * unit_kib + (frac * unit_kib + frac_div - 1) / frac_div;
	mib = (kib + 1023) / 1024;
	if (mib == 0)
		return fail(err, errlen, "%s is not a positive size", quote(s, q, sizeof(q)));
	if (mib > POOL_MEM_MAX_MB)
		return fail(err, errlen, "%s is too large (at most 16T)", quote(s, q, sizeof(q)));
	*mb = mib;
	return 0;
}

int pool_parse_signal(const char *s, char *name, size_t namelen, int *signum,
		      char *err, size_t errlen)
{
	char q[QUOTE_MAX + 10];
	const char *p = s;
	size_t i, len;

	if (!s || !*s)
		return fail(err, errlen, "an empty signal (use e.g. USR1)");
	if (!strncasecmp(p, "SIG", 3))
		p += 3;
	len = strlen(p);
	if (len > 0 && len <= 3 && strspn(p, "0123456789") == len) {
		int n = atoi(p);
		for (i = 0; i < sizeof(catchable) / sizeof(catchable[0]); i++) {
			if (catchable[i].num == n) {
				snprintf(name, namelen, "%s", catchable[i].name);
				*signum = n;
				return 0;
			}
		}
	} else {
		for (i = 0; i < sizeof(catchable) / sizeof(catchable[0]); i++) {
			if (!strcasecmp(p, catchable[i].name)) {
				snprintf(name, namelen, "%s", catchable[i].name);
				*signum = catchable[i].num;
				return 0;
			}
		}
		if (!strcasecmp(p, "KILL") || !strcasecmp(p, "STOP"))
			return fail(err, errlen, "SIG%s cannot be caught, so a job cannot checkpoint on it (use e.g. USR1)",
				    !strcasecmp(p, "KILL") ? "KILL" : "STOP");
	}
	return fail(err, errlen, "%s is not a signal a job can catch (use e.g. USR1, USR2, TERM, INT or HUP)",
		    quote(s, q, sizeof(q)));
}

int pool_check_dir(const char *s, char *err, size_t errlen)
{
	char q[QUOTE_MAX + 10];
	size_t len, i, start;
	int named = 0;

	if (!s || !*s)
		return fail(err, errlen, "an empty directory");
	len = strnlen(s, POOL_PATH_MAX);
	if (len > POOL_PATH_MAX / 2)
		return fail(err, errlen, "%s is longer than %d characters", quote(s, q, sizeof(q)),
			    POOL_PATH_MAX / 2);
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char) s[i];
		if (c < 0x20 || c == 0x7f)
			return fail(err, errlen, "%s contains control characters", quote(s, q, sizeof(q)));
	}
	for (start = 0; start <= len; start = i + 1) {
		for (i = start; i < len && s[i] != '/'; i++)
			;
		if (i == start)
			continue;
		if ((i - start == 1 && s[start] == '.') ||
		    (i - start == 2 && s[start] == '.' && s[start + 1] == '.'))
			return fail(err, errlen, "%s contains a '.' or '..' component", quote(s, q, sizeof(q)));
		named = 1;
	}
	if (!named)
		return fail(err, errlen, "%s names no directory", quote(s, q, sizeof(q)));
	return 0;
}

/* Append the components of src to out (at *n), one '/' before each. */
static int append_path(char *out, size_t outlen, size_t *n, const char *src, int *count)
{
	size_t i = 0, start, clen;

	while (src[i]) {
		while (src[i] == '/')
			i++;
		start = i;
		while (src[i] && src[i] != '/')
			i++;
		clen = i - start;
		if (!clen)
			continue;
		if (*n + clen + 2 > outlen)
			return -1;
		out[(*n)++] = '/';
		memcpy(out + *n, src + start, clen);
		*n += clen;
		out[*n] = '\0';
		if (count)
			(*count)++;
	}
	return 0;
}

int pool_checkpoint_path(const char *base, const char *user, uint32_t job_id,
			 const char *dir, char *out, size_t outlen,
			 int *user_zone, char *err, size_t errlen)
{
	char q[QUOTE_MAX + 10];
	char sub[POOL_ERR_MAX];
	char idbuf[16];
	size_t n = 0;
	int base_count = 0;

	if (!outlen)
		return fail(err, errlen, "no room for the checkpoint path");
	out[0] = '\0';
	if (dir && *dir) {
		if (pool_check_dir(dir, sub, sizeof(sub)) < 0)
			return fail(err, errlen, "%s", sub);
		if (dir[0] == '/') {
			if (append_path(out, outlen, &n, dir, NULL) < 0)
				return fail(err, errlen, "checkpoint path too long");
			*user_zone = -1;
			return 0;
		}
	}
	if (!base || base[0] != '/' || pool_check_dir(base, sub, sizeof(sub)) < 0)
		return fail(err, errlen, "the checkpoint base directory %s is not an absolute path",
			    quote(base ? base : "", q, sizeof(q)));
	if (!user || !*user || strchr(user, '/') || !strcmp(user, ".") || !strcmp(user, "..") ||
	    pool_check_dir(user, sub, sizeof(sub)) < 0)
		return fail(err, errlen, "%s is not a usable user name", quote(user ? user : "", q, sizeof(q)));
	if (append_path(out, outlen, &n, base, &base_count) < 0 ||
	    append_path(out, outlen, &n, user, NULL) < 0)
		return fail(err, errlen, "checkpoint path too long");
	if (dir && *dir) {
		if (append_path(out, outlen, &n, dir, NULL) < 0)
			return fail(err, errlen, "checkpoint path too long");
	} else {
		snprintf(idbuf, sizeof(idbuf), "%u", (unsigned) job_id);
		if (append_path(out, outlen, &n, idbuf, NULL) < 0)
			return fail(err, errlen, "checkpoint path too long");
	}
	*user_zone = base_count;
	return 0;
}

int pool_args_have_signal(const char *buf, size_t len)
{
	size_t i = 0, end, nlen;
	int first = 1;

	while (i < len) {
		for (end = i; end < len && buf[end]; end++)
			;
		if (first) {
			first = 0;
		} else if (end - i == 2 && buf[i] == '-' && buf[i + 1] == '-') {
			return 0;
		} else if (end - i > 2 && buf[i] == '-' && buf[i + 1] == '-') {
			const char *name = buf + i + 2;
			for (nlen = 0; i + 2 + nlen < end && name[nlen] != '='; nlen++)
				;
			if (nlen >= 3 && nlen <= 6 && !strncmp(name, "signal", nlen))
				return 1;
		}
		i = end + 1;
	}
	return 0;
}

/* Open a symbolic link component only when root controls it. */
static int follow_trusted(int dfd, const char *comp, const char *path, int user,
			  char *err, size_t errlen)
{
	struct stat lst, dst;
	int fd;

	if (fstatat(dfd, comp, &lst, AT_SYMLINK_NOFOLLOW) < 0)
		return fail(err, errlen, "%s: cannot inspect '%s': %s", path, comp, strerror(errno));
	if (!S_ISLNK(lst.st_mode))
		return fail(err, errlen, "%s: '%s' is not a directory", path, comp);
	if (user)
		return fail(err, errlen, "%s: '%s' is a symbolic link in the user's part of the path; not followed",
			    path, comp);
	if (fstat(dfd, &dst) < 0)
		return fail(err, errlen, "%s: %s", path, strerror(errno));
	if (lst.st_uid != 0 || dst.st_uid != 0 || (dst.st_mode & (S_IWGRP | S_IWOTH)))
		return fail(err, errlen, "%s: '%s' is a symbolic link that root does not control; not followed",
			    path, comp);
	fd = openat(dfd, comp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return fail(err, errlen, "%s: cannot open '%s': %s", path, comp, strerror(errno));
	return fd;
}

int pool_mkdirs(const char *path, int user_zone, mode_t sys_mode, mode_t user_mode,
		uid_t uid, gid_t gid, int flags, char *err, size_t errlen)
{
	char buf[POOL_PATH_MAX];
	char *save = NULL, *comp;
	int dfd, fd, idx = 0;

	if (!path || path[0] != '/' || strnlen(path, sizeof(buf)) >= sizeof(buf))
		return fail(err, errlen, "not an absolute path of less than %d characters", POOL_PATH_MAX);
	snprintf(buf, sizeof(buf), "%s", path);
	dfd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return fail(err, errlen, "cannot open /: %s", strerror(errno));
	for (comp = strtok_r(buf, "/", &save); comp; comp = strtok_r(NULL, "/", &save), idx++) {
		int user = user_zone >= 0 && idx >= user_zone;
		mode_t mode = user ? user_mode : sys_mode;
		int created = 0;
		struct stat st;

		if (!strcmp(comp, ".") || !strcmp(comp, "..")) {
			close(dfd);
			return fail(err, errlen, "%s: '.' and '..' components are not allowed", path);
		}
		fd = openat(dfd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 && errno == ENOENT) {
			if (mkdirat(dfd, comp, mode) == 0) {
				created = 1;
			} else if (errno != EEXIST) {
				fail(err, errlen, "%s: cannot create '%s': %s", path, comp, strerror(errno));
				close(dfd);
				return -1;
			}
			fd = openat(dfd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		}
		if (fd < 0 && (errno == ELOOP || errno == ENOTDIR))
			fd = follow_trusted(dfd, comp, path, user, err, errlen);
		else if (fd < 0)
			fail(err, errlen, "%s: cannot open '%s': %s", path, comp, strerror(errno));
		close(dfd);
		if (fd < 0)
			return -1;
		if (created && fchmod(fd, mode) < 0) {
			fail(err, errlen, "%s: cannot set the mode of '%s': %s", path, comp, strerror(errno));
			close(fd);
			return -1;
		}
		if (user && created && (flags & POOL_MKDIR_CHOWN) && fchown(fd, uid, gid) < 0) {
			fail(err, errlen, "%s: cannot give '%s' to uid %u: %s", path, comp, (unsigned) uid,
			     strerror(errno));
			close(fd);
			return -1;
		}
		if (user && !created && (flags & POOL_MKDIR_OWNER)) {
			if (fstat(fd, &st) < 0) {
				fail(err, errlen, "%s: cannot inspect '%s': %s", path, comp, strerror(errno));
				close(fd);
				return -1;
			}
			if (st.st_uid != uid && st.st_uid != 0) {
				fail(err, errlen, "%s: '%s' belongs to uid %u, not to uid %u", path, comp,
				     (unsigned) st.st_uid, (unsigned) uid);
				close(fd);
				return -1;
			}
		}
		dfd = fd;
	}
	close(dfd);
	return 0;
}
