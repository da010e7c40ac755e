/*
 * sluice-cni: the native front end of the chained CNI plugin; the runtime runs it for every Pod.
 *
 * It understands only where the agent is. It reads the network config, finds "socketPath" and
 * "timeoutSeconds" in it, and hands the invocation as it came (the CNI_* environment and the
 * config text) to sluice-agent. The agent runs the plugin's checks and answers with the exact
 * bytes to print and the exit status (cni/protocol.ts, InvocationRequest), which this program
 * writes out unchanged. Starting it costs a fraction of a millisecond; starting the standalone
 * plugin (a JavaScript runtime) costs about ten, on every Pod's ADD and DEL.
 *
 * Whenever it has no such answer to print, it execs sluice-cni-standalone from its own
 * directory, which does everything itself: VERSION, a command it does not forward, a config it
 * cannot scan with certainty (not strict JSON, an escaped or unusual "socketPath", a
 * "timeoutSeconds" that is not a positive number) and every failure to get an answer (the agent
 * unreachable, silent past the timeout, gone, or unreadable), passed as --agent-failure=... so the
 * standalone plugin reports it (and lets DEL and GC succeed) without asking the agent again.
 * The config is handed over in a memfd, since this program has read stdin.
 *
 * Built by scripts/build-cni.mjs (static, no libraries), which passes the per-command default
 * timeouts from cni/protocol.ts as SLUICE_TIMEOUT_<COMMAND> macros.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#if !defined(SLUICE_TIMEOUT_ADD) || !defined(SLUICE_TIMEOUT_DEL) || !defined(SLUICE_TIMEOUT_CHECK) || \
    !defined(SLUICE_TIMEOUT_GC) || !defined(SLUICE_TIMEOUT_STATUS)
#error "build with scripts/build-cni.mjs: it passes the default timeouts from cni/protocol.ts"
#endif

extern char **environ;

#define STANDALONE_NAME "sluice-cni-standalone"
#define DEFAULT_SOCKET_PATH "/var/run/sluice/cni.sock"
/* The agent refuses requests over 4 MiB; a config this large goes to the standalone plugin. */
#define MAX_CONFIG_BYTES (3u << 20)
/* An answer is a few KiB; anything near this size is not an answer. */
#define MAX_ANSWER_BYTES (16u << 20)
#define MAX_JSON_DEPTH 256

/* ------------------------------------------------------------------------------------------ */
/* Small buffers                                                                              */
/* ------------------------------------------------------------------------------------------ */

struct buf {
	char *data;
	size_t len, cap;
};

static void buf_reserve(struct buf *b, size_t more) {
	if (b->len + more <= b->cap) return;
	size_t cap = b->cap ? b->cap : 4096;
	while (cap < b->len + more) cap *= 2;
	char *data = realloc(b->data, cap);
	if (!data) {
		/* Out of memory in a CNI plugin: nothing sensible is left to print. */
		_exit(70);
	}
	b->data = data;
	b->cap = cap;
}

static void buf_add(struct buf *b, const char *s, size_t n) {
	buf_reserve(b, n);
	memcpy(b->data + b->len, s, n);
	b->len += n;
}

static void buf_str(struct buf *b, const char *s) { buf_add(b, s, strlen(s)); }

/* Appends s as the contents of a JSON string (without the quotes). */
static void buf_json_escaped(struct buf *b, const char *s, size_t n) {
	static const char hex[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\') {
			char e[2] = {'\\', (char)c};
			buf_add(b, e, 2);
		} else if (c < 0x20) {
			char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
			buf_add(b, e, 6);
		} else {
			buf_add(b, (const char *)&s[i], 1);
		}
	}
}

static int write_all(int fd, const char *p, size_t n) {
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR) continue;
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Handing over to the standalone plugin                                                      */
/* ------------------------------------------------------------------------------------------ */

static const char *command;      /* CNI_COMMAND, or NULL */
static struct buf config;        /* stdin as read so far */
static int config_read;          /* stdin has been (partly) consumed into `config` */

/* Exits like the standalone plugin would when even it cannot run: DEL and GC still succeed. */
static void cannot_run_standalone(const char *path, int err) {
	char line[PATH_MAX + 256];
	int n = snprintf(line, sizeof line, "sluice-cni: cannot run %s (%s): the plugin is installed incompletely; reinstall sluice\n",
	                 path, strerror(err));
	if (n > 0) write_all(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
	if (command && (strcmp(command, "DEL") == 0 || strcmp(command, "GC") == 0)) _exit(0);
	struct buf out = {0};
	buf_str(&out, "{\"cniVersion\":\"1.1.0\",\"code\":50,\"msg\":\"");
	snprintf(line, sizeof line, "cannot run %s (%s): the plugin is installed incompletely; reinstall sluice", path, strerror(err));
	buf_json_escaped(&out, line, strlen(line));
	buf_str(&out, "\",\"details\":\"\"}\n");
	write_all(1, out.data, out.len);
	_exit(1);
}

/*
 * Execs sluice-cni-standalone from this executable's directory with the same environment, the
 * config on stdin (what was read of it, then whatever stdin still holds) and, when the agent gave
 * no answer, why (--agent-failure=...).
 */
static void exec_standalone(const char *agent_failure) {
	char self[PATH_MAX];
	char path[PATH_MAX + sizeof STANDALONE_NAME + 1];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n <= 0) cannot_run_standalone("/proc/self/exe", n < 0 ? errno : ENOENT);
	self[n] = '\0';
	char *slash = strrchr(self, '/');
	if (!slash) cannot_run_standalone(self, ENOENT);
	slash[1] = '\0';
	snprintf(path, sizeof path, "%s%s", self, STANDALONE_NAME);

	if (config_read) {
		int fd = memfd_create("sluice-cni-config", 0);
		if (fd < 0) cannot_run_standalone(path, errno);
		if (write_all(fd, config.data ? config.data : "", config.len) < 0) cannot_run_standalone(path, errno);
		/* Whatever the runtime has not written yet follows what was read. */
		char chunk[65536];
		for (;;) {
			ssize_t r = read(0, chunk, sizeof chunk);
			if (r < 0 && errno == EINTR) continue;
			if (r <= 0) break;
			if (write_all(fd, chunk, (size_t)r) < 0) cannot_run_standalone(path, errno);
		}
		if (lseek(fd, 0, SEEK_SET) < 0 || dup2(fd, 0) < 0) cannot_run_standalone(path, errno);
		close(fd);
	}
	char arg[256];
	char *argv[3] = {path, NULL, NULL};
	if (agent_failure) {
		snprintf(arg, sizeof arg, "--agent-failure=%s", agent_failure);
		argv[1] = arg;
	}
	execve(path, argv, environ);
	cannot_run_standalone(path, errno);
}

/* ------------------------------------------------------------------------------------------ */
/* Strict JSON scan of the config's top level                                                 */
/* ------------------------------------------------------------------------------------------ */

struct scan {
	const char *p, *end;
};

static void ws(struct scan *s) {
	while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r')) s->p++;
}

static int hexval(char c) {
	if (c >= '0' && c <= '9') return c - '0';
	if (c >= 'a' && c <= 'f') return c - 'a' + 10;
	if (c >= 'A' && c <= 'F') return c - 'A' + 10;
	return -1;
}

/* A JSON string at s->p; its raw contents and whether it has escapes. 0 when not valid JSON. */
static int scan_string(struct scan *s, const char **start, size_t *len, int *escaped) {
	if (s->p >= s->end || *s->p != '"') return 0;
	s->p++;
	*start = s->p;
	*escaped = 0;
	while (s->p < s->end) {
		unsigned char c = (unsigned char)*s->p;
		if (c == '"') {
			*len = (size_t)(s->p - *start);
			s->p++;
			return 1;
		}
		if (c < 0x20) return 0;
		if (c == '\\') {
			*escaped = 1;
			s->p++;
			if (s->p >= s->end) return 0;
			char e = *s->p;
			if (e == 'u') {
				if (s->end - s->p < 5) return 0;
				for (int i = 1; i <= 4; i++)
					if (hexval(s->p[i]) < 0) return 0;
				s->p += 4;
			} else if (!strchr("\"\\/bfnrt", e)) {
				return 0;
			}
		}
		s->p++;
	}
	return 0;
}

/* A JSON number at s->p (the grammar exactly); its text. */
static int scan_number(struct scan *s, const char **start, size_t *len) {
	const char *p = s->p;
	*start = p;
	if (p < s->end && *p == '-') p++;
	if (p >= s->end) return 0;
	if (*p == '0') {
		p++;
	} else if (*p >= '1' && *p <= '9') {
		while (p < s->end && *p >= '0' && *p <= '9') p++;
	} else {
		return 0;
	}
	if (p < s->end && *p == '.') {
		p++;
		if (p >= s->end || *p < '0' || *p > '9') return 0;
		while (p < s->end && *p >= '0' && *p <= '9') p++;
	}
	if (p < s->end && (*p == 'e' || *p == 'E')) {
		p++;
		if (p < s->end && (*p == '+' || *p == '-')) p++;
		if (p >= s->end || *p < '0' || *p > '9') return 0;
		while (p < s->end && *p >= '0' && *p <= '9') p++;
	}
	*len = (size_t)(p - *start);
	s->p = p;
	return 1;
}

static int scan_literal(struct scan *s, const char *word) {
	size_t n = strlen(word);
	if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0) return 0;
	s->p += n;
	return 1;
}

static int scan_value(struct scan *s, int depth);

static int scan_object_or_array(struct scan *s, int depth) {
	if (depth > MAX_JSON_DEPTH) return 0;
	char close = *s->p == '{' ? '}' : ']';
	int object = close == '}';
	s->p++;
	ws(s);
	if (s->p < s->end && *s->p == close) {
		s->p++;
		return 1;
	}
	for (;;) {
		if (object) {
			const char *k;
			size_t kl;
			int esc;
			if (!scan_string(s, &k, &kl, &esc)) return 0;
			ws(s);
			if (s->p >= s->end || *s->p != ':') return 0;
			s->p++;
			ws(s);
		}
		if (!scan_value(s, depth + 1)) return 0;
		ws(s);
		if (s->p >= s->end) return 0;
		if (*s->p == ',') {
			s->p++;
			ws(s);
			continue;
		}
		if (*s->p != close) return 0;
		s->p++;
		return 1;
	}
}

static int scan_value(struct scan *s, int depth) {
	if (s->p >= s->end) return 0;
	const char *start;
	size_t len;
	int esc;
	switch (*s->p) {
	case '{':
	case '[': return scan_object_or_array(s, depth);
	case '"': return scan_string(s, &start, &len, &esc);
	case 't': return scan_literal(s, "true");
	case 'f': return scan_literal(s, "false");
	case 'n': return scan_literal(s, "null");
	default: return scan_number(s, &start, &len);
	}
}

struct agent_address {
	char socket_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	double timeout_s; /* 0: the command's default */
};

/*
 * Scans the whole config as strict JSON (an object at the top) and reads "socketPath" and
 * "timeoutSeconds" from its top level, the last occurrence winning as in JSON.parse. 0 when the
 * standalone plugin must decide instead: not strict JSON, or either field in a form this scan does
 * not interpret with certainty.
 */
static int scan_config(const char *text, size_t n, struct agent_address *a) {
	struct scan s = {text, text + n};
	strcpy(a->socket_path, DEFAULT_SOCKET_PATH);
	a->timeout_s = 0;
	ws(&s);
	if (s.p >= s.end || *s.p != '{') return 0;
	s.p++;
	ws(&s);
	if (s.p < s.end && *s.p == '}') {
		s.p++;
	} else {
		for (;;) {
			const char *k;
			size_t kl;
			int kesc;
			if (!scan_string(&s, &k, &kl, &kesc)) return 0;
			ws(&s);
			if (s.p >= s.end || *s.p != ':') return 0;
			s.p++;
			ws(&s);
			/* An escaped key may still spell one of the two names: let the standalone decide. */
			if (kesc) return 0;
			if (kl == 10 && memcmp(k, "socketPath", 10) == 0) {
				const char *v;
				size_t vl;
				int vesc;
				if (!scan_string(&s, &v, &vl, &vesc)) return 0;
				if (vesc || vl == 0 || v[0] != '/' || vl >= sizeof a->socket_path) return 0;
				for (size_t i = 0; i < vl; i++)
					if ((unsigned char)v[i] >= 0x80) return 0;
				memcpy(a->socket_path, v, vl);
				a->socket_path[vl] = '\0';
			} else if (kl == 14 && memcmp(k, "timeoutSeconds", 14) == 0) {
				const char *v;
				size_t vl;
				if (s.p >= s.end || !((*s.p >= '0' && *s.p <= '9') || *s.p == '-')) return 0;
				if (!scan_number(&s, &v, &vl) || vl >= 64) return 0;
				char num[64];
				memcpy(num, v, vl);
				num[vl] = '\0';
				double t = strtod(num, NULL);
				if (!isfinite(t) || t <= 0) return 0;
				a->timeout_s = t;
			} else if (!scan_value(&s, 1)) {
				return 0;
			}
			ws(&s);
			if (s.p >= s.end) return 0;
			if (*s.p == ',') {
				s.p++;
				ws(&s);
				continue;
			}
			if (*s.p != '}') return 0;
			s.p++;
			break;
		}
	}
	ws(&s);
	return s.p == s.end;
}

/* ------------------------------------------------------------------------------------------ */
/* The round trip                                                                             */
/* ------------------------------------------------------------------------------------------ */

static double now_s(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Milliseconds left until the deadline for poll(), at least 0. */
static int ms_left(double deadline) {
	double left = (deadline - now_s()) * 1000.0;
	if (left <= 0) return 0;
	return left > INT_MAX ? INT_MAX : (int)left + 1;
}

/* errno as Node.js names it in err.code, which the standalone plugin prints. */
static const char *errno_name(int err) {
	switch (err) {
	case ENOENT: return "ENOENT";
	case ECONNREFUSED: return "ECONNREFUSED";
	case EACCES: return "EACCES";
	case EPERM: return "EPERM";
	case ENOTDIR: return "ENOTDIR";
	case ENOTSOCK: return "ENOTSOCK";
	case EAGAIN: return "EAGAIN";
	case EPROTOTYPE: return "EPROTOTYPE";
	default: return strerror(err);
	}
}

static double default_timeout(const char *cmd) {
	if (strcmp(cmd, "ADD") == 0) return SLUICE_TIMEOUT_ADD;
	if (strcmp(cmd, "DEL") == 0) return SLUICE_TIMEOUT_DEL;
	if (strcmp(cmd, "CHECK") == 0) return SLUICE_TIMEOUT_CHECK;
	if (strcmp(cmd, "GC") == 0) return SLUICE_TIMEOUT_GC;
	return SLUICE_TIMEOUT_STATUS;
}

int main(void) {
	command = getenv("CNI_COMMAND");
	int forwarded = command && (strcmp(command, "ADD") == 0 || strcmp(command, "DEL") == 0 || strcmp(command, "CHECK") == 0 ||
	                            strcmp(command, "GC") == 0 || strcmp(command, "STATUS") == 0);
	/* Run by hand at a terminal, or a command answered locally: the standalone plugin's job. */
	if (!forwarded || isatty(0)) exec_standalone(NULL);
	signal(SIGPIPE, SIG_IGN);

	config_read = 1;
	for (;;) {
		buf_reserve(&config, 65536);
		ssize_t r = read(0, config.data + config.len, config.cap - config.len);
		if (r < 0 && errno == EINTR) continue;
		if (r < 0) {
			/* Hand stdin over as it is: the standalone plugin reads it and reports the error. */
			config_read = 0;
			exec_standalone(NULL);
		}
		if (r == 0) break;
		config.len += (size_t)r;
		if (config.len > MAX_CONFIG_BYTES) exec_standalone(NULL);
	}

	struct agent_address agent;
	if (!scan_config(config.data ? config.data : "", config.len, &agent)) exec_standalone(NULL);
	double timeout_s = agent.timeout_s > 0 ? agent.timeout_s : default_timeout(command);
	double deadline = now_s() + timeout_s;

	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		char why[160];
		snprintf(why, sizeof why, "unreachable:%s", errno_name(errno));
		exec_standalone(why);
	}
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	strcpy(addr.sun_path, agent.socket_path);
	if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
		char why[160];
		snprintf(why, sizeof why, "unreachable:%s", errno_name(errno));
		close(fd);
		exec_standalone(why);
	}

	struct buf req = {0};
	buf_str(&req, "{\"invocation\":{\"env\":{");
	int first = 1;
	for (char **e = environ; *e; e++) {
		if (strncmp(*e, "CNI_", 4) != 0) continue;
		const char *eq = strchr(*e, '=');
		if (!eq) continue;
		if (!first) buf_str(&req, ",");
		first = 0;
		buf_str(&req, "\"");
		buf_json_escaped(&req, *e, (size_t)(eq - *e));
		buf_str(&req, "\":\"");
		buf_json_escaped(&req, eq + 1, strlen(eq + 1));
		buf_str(&req, "\"");
	}
	buf_str(&req, "},\"stdin\":\"");
	buf_json_escaped(&req, config.data ? config.data : "", config.len);
	buf_str(&req, "\"}}\n");

	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	size_t sent = 0;
	while (sent < req.len) {
		ssize_t w = send(fd, req.data + sent, req.len - sent, MSG_NOSIGNAL);
		if (w > 0) {
			sent += (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR) continue;
		if (w < 0 && errno == EAGAIN) {
			struct pollfd p = {.fd = fd, .events = POLLOUT};
			int ms = ms_left(deadline);
			if (ms == 0 || poll(&p, 1, ms) == 0) exec_standalone("timeout");
			continue;
		}
		exec_standalone("closed");
	}

	/* The answer: "<exit> <stdout bytes> <stderr bytes>\n", then those bytes. */
	struct buf ans = {0};
	size_t header = 0, want = 0;
	unsigned exit_status = 0;
	unsigned long out_len = 0, err_len = 0;
	for (;;) {
		if (header && ans.len >= want) break;
		buf_reserve(&ans, 65536);
		ssize_t r = recv(fd, ans.data + ans.len, ans.cap - ans.len, 0);
		if (r < 0 && errno == EINTR) continue;
		if (r < 0 && errno == EAGAIN) {
			struct pollfd p = {.fd = fd, .events = POLLIN};
			int ms = ms_left(deadline);
			if (ms == 0 || poll(&p, 1, ms) == 0) exec_standalone("timeout");
			continue;
		}
		if (r < 0) exec_standalone("closed");
		if (r == 0) {
			if (ans.len == 0) exec_standalone("closed");
			exec_standalone(header ? "malformed:answer cut short" : "malformed:no answer header");
		}
		ans.len += (size_t)r;
		if (ans.len > MAX_ANSWER_BYTES) exec_standalone("malformed:answer larger than 16 MiB");
		if (!header) {
			/*
			 * A JSON line instead: an agent of another version that does not take invocations. The
			 * standalone plugin asks it again in the request form every version takes.
			 */
			if (ans.data[0] == '{') exec_standalone(NULL);
			char *nl = memchr(ans.data, '\n', ans.len);
			if (!nl) {
				if (ans.len > 64) exec_standalone("malformed:no answer header");
				continue;
			}
			char line[65];
			size_t ll = (size_t)(nl - ans.data);
			memcpy(line, ans.data, ll);
			line[ll] = '\0';
			char extra;
			if (sscanf(line, "%u %lu %lu%c", &exit_status, &out_len, &err_len, &extra) != 3 || exit_status > 255 ||
			    out_len > MAX_ANSWER_BYTES || err_len > MAX_ANSWER_BYTES) {
				exec_standalone("malformed:no answer header");
			}
			header = ll + 1;
			want = header + out_len + err_len;
		}
	}
	close(fd);
	if (ans.len != want) exec_standalone("malformed:answer longer than its header says");
	write_all(2, ans.data + header + out_len, err_len);
	if (write_all(1, ans.data + header, out_len) < 0) return 1;
	return (int)exit_status;
}
