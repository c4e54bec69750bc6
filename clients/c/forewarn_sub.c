/*
 * forewarn_sub: subscribe to a forewarn agent from C and print each notice, one JSON per line.
 *
 * Build:  cc -O2 -Wall -o forewarn_sub forewarn_sub.c $(pkg-config --cflags --libs libzmq)
 * Run:    ./forewarn_sub [ENDPOINT] [--count N] [--replays] [--settle SECONDS]
 *
 * ENDPOINT defaults to $FOREWARN_EVENTS, else ipc://$FOREWARN_RUNTIME_DIR/events, else the
 * agent's default runtime directory: /run/forewarn when writable (or an agent runs there),
 * else $XDG_RUNTIME_DIR/forewarn, else /tmp/forewarn-<uid>; without an ENDPOINT, that default
 * is worked out again every second while no agent is heard. The agent's config file is not
 * read: with runtime_dir or events set there, set FOREWARN_RUNTIME_DIR or FOREWARN_EVENTS.
 *
 * Each message has two frames: the topic ("notice" or "heartbeat") and UTF-8 JSON (see
 * clients/schema/protocol-v1.json). Parse the JSON with the library of your choice; "action" is
 * drain, terminate or clear. Each notice is printed once: the agent sends every active notice
 * again to every subscriber whenever one joins, and such a replay (the same id, action,
 * reason, deadline and detail as one printed already; only seq, sent_at and noticed_at may
 * differ, and the detail's clock_ahead_seconds, a skew the agent sends nothing for) is not
 * printed again, unless --replays. A notice that comes back after its clear (or
 * after the heartbeats stopped listing it) is printed again. --count counts printed notices.
 *
 * A notice withdrawn while no agent was connected (across an agent restart) never gets a
 * clear from the agent: once the heartbeats stop listing it (counted 5 s after a restart, on
 * this program's clock and on the agent's, its heartbeats' "sent_at"; --settle SECONDS
 * changes the 5 s), a clear is printed for it, its detail {"withdrawn": "no longer listed by
 * the agent's heartbeat"}, as the Python client does.
 *
 * A notice or a heartbeat whose "v" is not the integer 1 (2, "1", 1.0, true, or none at all)
 * is of a protocol this program cannot read: it is dropped, with a line on stderr (at most one
 * a minute, counting the others), as the Python client drops it. So is one with an object that
 * names a key twice (at any depth; "\u0061" and "a" are one key): JSON leaves it to each
 * reader which one counts, and this one and Python's differ. So is a notice whose "seq" is no
 * JSON integer ("12", 1.5, null, or none), which the Python client refuses, and one with a
 * field it refuses: "id", "action", "reason" or "provider" missing or no string, "noticed_at"
 * or "sent_at" no RFC 3339 time, "deadline" neither a time nor null, "detail" neither an
 * object nor null. And one nested
 * deeper than 1000 levels of arrays and objects, which Python's json does not read.
 *
 * Heartbeats are read, not printed. Without any for 5 s at start, or for 3 s from an agent
 * heard before, a line on stderr says so (and another when one is heard again). A notice the
 * agent's heartbeats list that never arrived here was dropped on the way (a reader that stopped
 * reading filled the high-water marks), and subscribing to "notice" again makes the agent send
 * every active notice again. So does a gap in the agent's "seq", which numbers every message
 * it sends: a change of a notice received already (a drain escalated to terminate) dropped so.
 * So does a notice a restarted agent's second heartbeat lists that its replay (to every client
 * that reconnects) did not bring: the jump to its new "seq" mark hides that loss.
 *
 * It subscribes to "replay/<token>" too (nothing is published there): an agent that has
 * "replay_for" in its heartbeats lists the token in the heartbeat of the replay answering this
 * program's subscription. Until then (at most 10 s) what its heartbeats list is that replay
 * still to come, not a loss: an agent slow to read subscriptions beat for seconds listing a
 * notice in force, and this program said it was "never received here" and asked again. A
 * restarted agent's replay is checked at the heartbeat after the one naming the token.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, gmtime_r, lstat under -std=c99 too */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define REPLAY_ASK_EVERY 10.0
#define SILENT_AT_START 5.0 /* as `forewarn watch`: no agent heard at all */
#define SILENT_LOST 3.0     /* as the Python client: an agent heard before is gone */
#define RESTART_SETTLE 5.0  /* as the Python client; --settle changes it */
/* Levels of arrays and objects read at most: Python's json reads some 980 (its recursion
 * limit), so the Python client drops a message nested deeper, as this program does. */
#define MAX_DEPTH 1000
#define TEXT_OF(number) #number
#define TEXT(number) TEXT_OF(number)
/* As the Python client: with the default endpoint (none given), while no agent is heard, the
 * default is worked out again this often. A subscriber started before the system agent (at
 * boot, or while an upgrade restarts it with /run/forewarn removed) took a place of its own
 * and never heard the agent that started in /run/forewarn a moment later. */
#define LOOK_AGAIN_EVERY 1.0

extern char **environ; /* POSIX declares it nowhere without _GNU_SOURCE */

static volatile sig_atomic_t stopping = 0;
/* How long a restarted agent's heartbeats leave out what it has not settled (--settle). */
static double restart_settle = RESTART_SETTLE;

static void on_signal(int signum) {
    (void)signum;
    stopping = 1;
}

#ifndef FOREWARN_SYSTEM_RUNTIME_DIR
#define FOREWARN_SYSTEM_RUNTIME_DIR "/run/forewarn"
#endif

/* Whether this process may create files in `dir` (or create `dir` in its parent). */
static int writable(const char *dir) {
    struct stat st;
    if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
        return access(dir, W_OK | X_OK) == 0;
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (!slash)
        return 0;
    *(slash == parent ? slash + 1 : slash) = '\0';
    return stat(parent, &st) == 0 && S_ISDIR(st.st_mode) && access(parent, W_OK | X_OK) == 0;
}

/* Whether this process can enter `dir` and an agent has used it (its lock or control socket). */
static int agent_runs_in(const char *dir) {
    char path[4096];
    struct stat st;
    if (access(dir, X_OK) != 0)
        return 0;
    snprintf(path, sizeof path, "%s/agent.lock", dir);
    if (lstat(path, &st) == 0)
        return 1;
    snprintf(path, sizeof path, "%s/control", dir);
    return lstat(path, &st) == 0;
}

/* The runtime directory as the agent and the Python client choose it (but for the config
 * file, which is not read here: an agent set up there alone needs FOREWARN_RUNTIME_DIR or
 * FOREWARN_EVENTS): an agent started by a user without root listens in $XDG_RUNTIME_DIR or
 * /tmp, not /run. */
/* The variable's value without the ASCII space around it (a ConfigMap's YAML block ends it
 * with a newline), in `buf`; NULL when it is unset or blank. As the agent reads it. */
/* The variable `name` in any case, the exact spelling first: the agent and the Python client
 * read FOREWARN_* names in any case, and with `forewarn_runtime_dir` set this went to the
 * default place, where no agent listened. */
static const char *getenv_any_case(const char *name) {
    const char *value = getenv(name);
    size_t length = strlen(name);
    for (char **entry = environ; !value && entry && *entry; entry++)
        if (strncasecmp(*entry, name, length) == 0 && (*entry)[length] == '=')
            value = *entry + length + 1;
    return value;
}

static const char *trimmed(const char *name, char *buf, size_t size) {
    static const char space[] = " \t\n\r\f\v";
    const char *value = getenv_any_case(name);
    if (!value)
        return NULL;
    value += strspn(value, space);
    size_t length = strlen(value);
    while (length > 0 && strchr(space, value[length - 1]))
        length--;
    if (length == 0)
        return NULL;
    snprintf(buf, size, "%.*s", (int)length, value);
    return buf;
}

static void default_endpoint(char *out, size_t size) {
    char events_buf[4096], runtime_buf[4096];
    const char *events = trimmed("FOREWARN_EVENTS", events_buf, sizeof events_buf);
    const char *runtime = trimmed("FOREWARN_RUNTIME_DIR", runtime_buf, sizeof runtime_buf);
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    const char *home = getenv("HOME");
    if (events)
        snprintf(out, size, "%s", events);
    else if (runtime) {
        if (runtime[0] == '~' && (runtime[1] == '/' || !runtime[1]) && home)
            snprintf(out, size, "ipc://%s%s/events", home, runtime + 1);
        else
            snprintf(out, size, "ipc://%s/events", runtime);
    } else if (writable(FOREWARN_SYSTEM_RUNTIME_DIR) || agent_runs_in(FOREWARN_SYSTEM_RUNTIME_DIR))
        snprintf(out, size, "ipc://%s/events", FOREWARN_SYSTEM_RUNTIME_DIR);
    else if (xdg && *xdg && writable(xdg))
        snprintf(out, size, "ipc://%s/forewarn/events", xdg);
    else
        snprintf(out, size, "ipc:///tmp/forewarn-%lu/events", (unsigned long)getuid());
}

static double monotonic(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

/* A set of ids, each the raw text between the quotes of a JSON string (not unescaped: the
 * agent writes an id the same way in a notice and in a heartbeat). It grows as needed: with a
 * fixed 256, a heartbeat listing more left out notices received here, which were then
 * printed as withdrawn. The agent caps manual notices (64), not the providers' ones. Ids are
 * found through a hash table: scanned in a list, a heartbeat listing 20,000 ids took 0.6 s
 * (4.4 s under ASan), quadratic in the ids, while a notice behind it waited. */
typedef struct {
    char *id; /* malloc, NUL-terminated */
    size_t len;
    unsigned long long hash;
    unsigned long long seen; /* what was printed for it: see fingerprint() */
    char *body;              /* the notice printed last for it (malloc), or NULL */
} id_entry;

typedef struct {
    size_t count, room;
    id_entry *items;
    /* Open addressing with linear probing: each slot holds 1 + an index into items, or 0;
     * twice as many slots as `room`, a power of two (mask = slots - 1). */
    size_t *slots;
    size_t mask;
} id_set;

static unsigned long long id_hash(const char *id, size_t len) {
    unsigned long long hash = 14695981039346656037ULL; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        hash = (hash ^ (unsigned char)id[i]) * 1099511628211ULL;
    return hash;
}

/* The slot holding `id`, or the empty slot where it would go; the set has slots. */
static size_t slot_of(const id_set *set, const char *id, size_t len, unsigned long long hash) {
    size_t at = (size_t)hash & set->mask;
    while (set->slots[at]) {
        const id_entry *entry = &set->items[set->slots[at] - 1];
        if (entry->hash == hash && entry->len == len && memcmp(entry->id, id, len) == 0)
            break;
        at = (at + 1) & set->mask;
    }
    return at;
}

static long set_find(const id_set *set, const char *id, size_t len) {
    if (!set->slots)
        return -1;
    size_t at = slot_of(set, id, len, id_hash(id, len));
    return set->slots[at] ? (long)(set->slots[at] - 1) : -1;
}

/* The entry of `id`, added if new; -1 when memory for it cannot be had. */
static long set_add(id_set *set, const char *id, size_t len) {
    long found = set_find(set, id, len);
    if (found >= 0)
        return found;
    if (set->count == set->room) {
        size_t room = set->room ? 2 * set->room : 64;
        if (room > SIZE_MAX / 2 / sizeof(size_t) || room > SIZE_MAX / sizeof(id_entry))
            return -1;
        id_entry *grown = realloc(set->items, room * sizeof *grown);
        if (!grown)
            return -1;
        set->items = grown;
        size_t *slots = calloc(2 * room, sizeof *slots);
        if (!slots)
            return -1;
        free(set->slots);
        set->slots = slots;
        set->mask = 2 * room - 1;
        set->room = room;
        for (size_t i = 0; i < set->count; i++)
            set->slots[slot_of(set, set->items[i].id, set->items[i].len, set->items[i].hash)] =
                i + 1;
    }
    char *copy = malloc(len + 1);
    if (!copy)
        return -1;
    memcpy(copy, id, len);
    copy[len] = '\0';
    unsigned long long hash = id_hash(id, len);
    set->slots[slot_of(set, id, len, hash)] = set->count + 1;
    set->items[set->count] =
        (id_entry){.id = copy, .len = len, .hash = hash, .seen = 0, .body = NULL};
    return (long)set->count++;
}

static void set_remove(id_set *set, const char *id, size_t len) {
    if (!set->slots)
        return;
    size_t hole = slot_of(set, id, len, id_hash(id, len));
    if (!set->slots[hole])
        return;
    size_t at = set->slots[hole] - 1;
    /* Empty the slot, then move back each entry after it that the hole would hide from its
     * own home slot (deletion in linear probing, without tombstones). */
    set->slots[hole] = 0;
    for (size_t next = (hole + 1) & set->mask; set->slots[next]; next = (next + 1) & set->mask) {
        size_t home = (size_t)set->items[set->slots[next] - 1].hash & set->mask;
        int stays = hole <= next ? (hole < home && home <= next) : (hole < home || home <= next);
        if (stays)
            continue;
        set->slots[hole] = set->slots[next];
        set->slots[next] = 0;
        hole = next;
    }
    free(set->items[at].id);
    free(set->items[at].body);
    size_t last = --set->count;
    if (at != last) {
        const id_entry *moved = &set->items[last];
        set->slots[slot_of(set, moved->id, moved->len, moved->hash)] = at + 1;
        set->items[at] = set->items[last];
    }
}

static void set_clear(id_set *set) {
    for (size_t i = 0; i < set->count; i++) {
        free(set->items[i].id);
        free(set->items[i].body);
    }
    if (set->slots)
        memset(set->slots, 0, (set->mask + 1) * sizeof *set->slots);
    set->count = 0;
}

/* A minimal JSON scanner, enough to find a top-level member of an object; it never reads past
 * end and returns NULL on anything it does not understand. */
static const char *skip_space(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

static const char *skip_string(const char *p, const char *end) { /* p at the opening quote */
    for (p++; p < end; p++) {
        if (*p == '\\') {
            if (++p >= end)
                return NULL;
        } else if (*p == '"') {
            return p + 1;
        }
    }
    return NULL;
}

static const char *skip_value(const char *p, const char *end) {
    int depth = 0;
    p = skip_space(p, end);
    do {
        if (p >= end)
            return NULL;
        if (*p == '"') {
            if (!(p = skip_string(p, end)))
                return NULL;
            continue;
        }
        if (*p == '{' || *p == '[') {
            if (++depth > MAX_DEPTH)
                return NULL;
        } else if (*p == '}' || *p == ']') {
            if (--depth < 0)
                return NULL;
        } else if (depth == 0) { /* a number, true, false or null */
            while (p < end && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\n')
                p++;
            return p;
        }
        p++;
    } while (depth > 0);
    return p;
}

static long key_char(const char **p, const char *end);

/* Whether the raw text [name, end) of a key (or of a string value) reads as the ASCII `key`
 * once JSON's escapes are read: compared as written, `"dead\u006cine"` was no "deadline" here, where Python's json
 * reads one. */
static int key_is(const char *name, const char *end, const char *key) {
    while (name < end && *key)
        if (key_char(&name, end) != (unsigned char)*key++)
            return 0;
    return name == end && !*key;
}

/* The value of member `key` of the object in [p, end): its span, or NULL. */
static const char *member(const char *p, const char *end, const char *key, const char **stop) {
    p = skip_space(p, end);
    if (p >= end || *p != '{')
        return NULL;
    p = skip_space(p + 1, end);
    while (p < end && *p == '"') {
        const char *name = p + 1, *after = skip_string(p, end);
        if (!after)
            return NULL;
        p = skip_space(after, end);
        if (p >= end || *p != ':')
            return NULL;
        const char *value = skip_space(p + 1, end), *value_end = skip_value(value, end);
        if (!value_end)
            return NULL;
        if (key_is(name, after - 1, key)) {
            *stop = value_end;
            return value;
        }
        p = skip_space(value_end, end);
        if (p < end && *p == ',')
            p = skip_space(p + 1, end);
    }
    return NULL;
}

/* The raw text of a string value at p (without its quotes), or NULL. */
static const char *string_at(const char *p, const char *end, size_t *len) {
    const char *after;
    if (!p || p >= end || *p != '"' || !(after = skip_string(p, end)))
        return NULL;
    *len = (size_t)(after - 1 - (p + 1));
    return p + 1;
}

/* `digits` decimal digits at p, or -1. */
static int digits_at(const char *p, int digits) {
    int value = 0;
    for (int i = 0; i < digits; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        value = value * 10 + (p[i] - '0');
    }
    return value;
}

/* The RFC 3339 time in [p, p + len) (as the Python client's parse_time reads it: a `Z` or an
 * offset, any fraction) as seconds since 1970 in *out; 0 when it is none. */
static int rfc3339_seconds(const char *p, size_t len, double *out) {
    if (len < 20 || p[4] != '-' || p[7] != '-' || (p[10] != 'T' && p[10] != 't' && p[10] != ' ') ||
        p[13] != ':' || p[16] != ':')
        return 0;
    int year = digits_at(p, 4), month = digits_at(p + 5, 2), day = digits_at(p + 8, 2);
    int hour = digits_at(p + 11, 2), minute = digits_at(p + 14, 2), second = digits_at(p + 17, 2);
    static const int month_days[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (year < 1 || month < 1 || month > 12 || day < 1 || day > month_days[month - 1] ||
        hour > 23 || minute > 59 || second > 59 || hour < 0 || minute < 0 || second < 0)
        return 0;
    int leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    if (month == 2 && day == 29 && !leap)
        return 0;
    size_t i = 19;
    double fraction = 0, scale = 0.1;
    if (p[i] == '.') {
        if (++i >= len || p[i] < '0' || p[i] > '9')
            return 0;
        for (; i < len && p[i] >= '0' && p[i] <= '9'; i++, scale /= 10)
            fraction += (p[i] - '0') * scale;
    }
    long offset = 0;
    if (i + 1 == len && (p[i] == 'Z' || p[i] == 'z')) {
        offset = 0;
    } else if (i < len && (p[i] == '+' || p[i] == '-')) {
        size_t rest = len - i - 1;
        const char *zone = p + i + 1;
        int zone_hours = rest >= 2 ? digits_at(zone, 2) : -1;
        int zone_minutes = rest == 5 && zone[2] == ':' ? digits_at(zone + 3, 2)
                           : rest == 4                  ? digits_at(zone + 2, 2)
                                                        : -1;
        /* RFC 3339's hours 00-23 and minutes 00-59, as the Python client's parse_time takes
         * them: `+05:99` read as +06:39 put a time 39 minutes off where Python refuses it. */
        if (zone_hours < 0 || zone_minutes < 0 || zone_hours > 23 || zone_minutes > 59)
            return 0;
        offset = (p[i] == '+' ? 1 : -1) * (zone_hours * 3600L + zone_minutes * 60L);
    } else {
        return 0;
    }
    /* Days since 1970-01-01 of the civil date (H. Hinnant's days_from_civil). */
    long y = month <= 2 ? year - 1 : year;
    long era = (y >= 0 ? y : y - 399) / 400;
    long yoe = y - era * 400;
    long doy = (153L * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1;
    long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    long days = era * 146097 + doe - 719468;
    *out = (double)days * 86400.0 + hour * 3600.0 + minute * 60.0 + second + fraction -
           (double)offset;
    return 1;
}

static int json_time_seconds(const char *raw, size_t len, double *out);

/* The heartbeat's "sent_at" (the agent's clock) in *out; 0 when it has none it can read. */
static int sent_at(const char *body, size_t size, double *out) {
    const char *end = body + size, *stop;
    size_t len;
    const char *text = string_at(member(body, end, "sent_at", &stop), end, &len);
    return text != NULL && json_time_seconds(text, len, out);
}

/* The next character of a JSON string's raw text [*p, end), as JSON reads it: an escape
 * (\u with a surrogate pair joined) or a UTF-8 sequence as written, as one code point; -1 on
 * what it does not understand. */
static long next_char(const char **p, const char *end) {
    const unsigned char *s = (const unsigned char *)*p;
    long c;
    if ((const char *)s >= end)
        return -1;
    if (*s != '\\') {
        int more = *s < 0x80 ? 0 : *s >= 0xf0 ? 3 : *s >= 0xe0 ? 2 : *s >= 0xc0 ? 1 : -1;
        if (more < 0 || (const char *)s + more >= end)
            return -1;
        c = more == 0 ? *s : *s & (0x3f >> more);
        for (int i = 1; i <= more; i++)
            c = (c << 6) | (s[i] & 0x3f);
        *p += more + 1;
        return c;
    }
    if ((const char *)s + 1 >= end)
        return -1;
    static const char plain[] = "\"\\/bfnrt", meant[] = "\"\\/\b\f\n\r\t";
    const char *at = s[1] ? strchr(plain, s[1]) : NULL;
    if (at) {
        *p += 2;
        return meant[at - plain];
    }
    if (s[1] != 'u' || (const char *)s + 6 > end)
        return -1;
    char hex[5] = {0};
    memcpy(hex, s + 2, 4);
    if (strspn(hex, "0123456789abcdefABCDEF") != 4)
        return -1;
    c = strtol(hex, NULL, 16);
    *p += 6;
    /* A high surrogate followed by an escaped low one is one character, as in Python. */
    if (c >= 0xd800 && c < 0xdc00 && *p + 6 <= end && (*p)[0] == '\\' && (*p)[1] == 'u') {
        const char *next = *p;
        long low = next_char(&next, end);
        if (low >= 0xdc00 && low < 0xe000) {
            *p = next;
            c = 0x10000 + ((c - 0xd800) << 10) + (low - 0xdc00);
        }
    }
    return c;
}

/* As next_char, but a byte it does not understand stands for itself (past every code point):
 * the scan always moves on. */
static long key_char(const char **p, const char *end) {
    long c = next_char(p, end);
    return c >= 0 ? c : 0x110000 + (unsigned char)*(*p)++;
}

/* Whether code point c is one Python's str.strip() removes (str.isspace()). */
static int python_space(long c) {
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
           c == 0x202f || c == 0x205f || c == 0x3000;
}

/* The time in the raw text [raw, raw + len) of a JSON string, read as the Python client reads
 * it: JSON's escapes read first (`\u002b00:00` is `+00:00`, `\/` is `/`), then the space
 * Python's strip() takes off either end, then RFC 3339 in ASCII. Read as written, a deadline
 * whose `+` the publisher escaped made a notice the Python client acts on one dropped here. */
#define SPACE_MARK ((char)0x80)
#define OTHER_MARK ((char)0x81)
static int json_time_seconds(const char *raw, size_t len, double *out) {
    /* Each code point read becomes one byte (never more bytes than its escape or UTF-8 took):
     * ASCII as itself, other space as 0x80 and anything else as 0x81, so only ASCII is a
     * digit or separator. */
    char small[128], *text = len < sizeof small ? small : malloc(len + 1);
    if (!text)
        return 0;
    const char *p = raw, *end = raw + len;
    size_t n = 0;
    int read = 1;
    while (p < end) {
        long c = next_char(&p, end);
        if (c < 0) {
            read = 0;
            break;
        }
        text[n++] = c < 0x80 ? (char)c : python_space(c) ? SPACE_MARK : OTHER_MARK;
    }
    size_t first = 0;
    while (first < n && (text[first] == SPACE_MARK || python_space((unsigned char)text[first])))
        first++;
    while (n > first && (text[n - 1] == SPACE_MARK || python_space((unsigned char)text[n - 1])))
        n--;
    read = read && rfc3339_seconds(text + first, n - first, out);
    if (text != small)
        free(text);
    return read;
}

/* A key of an object: the raw text between its quotes, and a hash of what JSON reads there. */
typedef struct {
    unsigned long long hash;
    const char *name;
    size_t len;
} key_span;

static int same_key(const key_span *a, const key_span *b) {
    const char *p = a->name, *q = b->name;
    const char *p_end = a->name + a->len, *q_end = b->name + b->len;
    while (p < p_end && q < q_end)
        if (key_char(&p, p_end) != key_char(&q, q_end))
            return 0;
    return p == p_end && q == q_end;
}

static int by_hash(const void *a, const void *b) {
    unsigned long long x = ((const key_span *)a)->hash, y = ((const key_span *)b)->hash;
    return x < y ? -1 : x > y;
}

/* What unique_keys sets `*dup` to for a value nested deeper than MAX_DEPTH. */
static const char too_deep[] = "";

/* The end of the JSON value at p, having looked into every object in it for a key named
 * twice: JSON leaves it undefined which one counts (this scanner reads the first, Python's json
 * the last), so such a message is refused by every reader. NULL when a key is named twice
 * (`*dup`, `*dup_len`: its raw text), when it is nested deeper than MAX_DEPTH (`*dup` is
 * too_deep: looking 64 levels deep only, a key named twice deeper went unseen), or on what it
 * does not understand (`*dup` NULL). */
static const char *unique_keys(const char *p, const char *end, int depth, const char **dup,
                               size_t *dup_len) {
    p = skip_space(p, end);
    if (p >= end)
        return NULL;
    if (depth > MAX_DEPTH) {
        *dup = too_deep;
        *dup_len = 0;
        return NULL;
    }
    if (*p == '[') {
        p = skip_space(p + 1, end);
        while (p < end && *p != ']') {
            if (!(p = unique_keys(p, end, depth + 1, dup, dup_len)))
                return NULL;
            p = skip_space(p, end);
            if (p < end && *p == ',')
                p = skip_space(p + 1, end);
        }
        return p < end ? p + 1 : NULL;
    }
    if (*p != '{')
        return skip_value(p, end);
    key_span *keys = NULL;
    size_t count = 0, room = 0;
    p = skip_space(p + 1, end);
    while (p && p < end && *p == '"') {
        const char *after = skip_string(p, end);
        if (!after)
            break;
        if (count == room) {
            key_span *grown = realloc(keys, (room = room ? 2 * room : 16) * sizeof *keys);
            if (!grown)
                break;
            keys = grown;
        }
        key_span *key = &keys[count++];
        key->name = p + 1;
        key->len = (size_t)(after - 1 - key->name);
        key->hash = 14695981039346656037ULL;
        for (const char *c = key->name; c < after - 1;)
            key->hash = (key->hash ^ (unsigned long long)key_char(&c, after - 1)) * 1099511628211ULL;
        p = skip_space(after, end);
        if (p >= end || *p != ':')
            break;
        if (!(p = unique_keys(p + 1, end, depth + 1, dup, dup_len)))
            break;
        p = skip_space(p, end);
        if (p < end && *p == ',')
            p = skip_space(p + 1, end);
    }
    if (!*dup && count > 1) {
        qsort(keys, count, sizeof *keys, by_hash);
        for (size_t i = 0; i < count && !*dup; i++)
            for (size_t j = i + 1; j < count && keys[j].hash == keys[i].hash; j++)
                if (same_key(&keys[i], &keys[j])) {
                    *dup = keys[i].name;
                    *dup_len = keys[i].len;
                    break;
                }
    }
    free(keys);
    if (*dup || !p || p >= end || *p != '}')
        return NULL;
    return p + 1;
}

/* 1 when the message names a key twice in one of its objects (`*shown` is that key), 2 when
 * it is nested deeper than MAX_DEPTH, else 0. */
static int key_problem(const char *body, size_t size, const char **shown, int *shown_len) {
    const char *dup = NULL;
    size_t len = 0;
    unique_keys(body, body + size, 0, &dup, &len);
    if (!dup)
        return 0;
    if (dup == too_deep)
        return 2;
    *shown = dup;
    *shown_len = len > 40 ? 40 : (int)len;
    return 1;
}

/* Whether the message's "v" is the JSON integer 1, exactly as the Python client takes it:
 * `1.0`, `1e0`, `true` and `"1"` are other types there. Otherwise `*shown` and `*shown_len`
 * say what it was, for the line on stderr. */
static int version_1(const char *body, size_t size, const char **shown, int *shown_len) {
    const char *end = body + size, *stop = NULL;
    const char *v = member(body, end, "v", &stop);
    if (!v) {
        *shown = "missing";
        *shown_len = 7;
        return 0;
    }
    while (stop > v && stop[-1] && strchr(" \t\r\n", stop[-1])) /* not the NUL strchr finds */
        stop--;
    if (stop - v == 1 && *v == '1')
        return 1;
    *shown = v;
    *shown_len = stop - v > 40 ? 40 : (int)(stop - v);
    return 0;
}

/* Whether the notice's "seq" is a JSON integer (a sign, digits, no leading zero, no fraction
 * or exponent), as the Python client's Event.from_json takes it; else 0, with the value in
 * *shown. Printed, a notice with "seq": "12" (or null, 1.5, none) was one Python drops. */
static int seq_integer(const char *body, size_t size, const char **shown, int *shown_len) {
    const char *end = body + size, *stop = NULL;
    const char *seq = member(body, end, "seq", &stop);
    if (!seq) {
        *shown = "missing";
        *shown_len = 7;
        return 0;
    }
    while (stop > seq && stop[-1] && strchr(" \t\r\n", stop[-1])) /* not the NUL strchr finds */
        stop--;
    const char *p = seq + (*seq == '-');
    int digits = 0;
    while (p + digits < stop && p[digits] >= '0' && p[digits] <= '9')
        digits++;
    if (digits > 0 && p + digits == stop && (digits == 1 || *p != '0'))
        return 1;
    *shown = seq;
    *shown_len = stop - seq > 40 ? 40 : (int)(stop - seq);
    return 0;
}

/* Why a notice is one the Python client's Event.from_json refuses, besides "v" and "seq": a
 * field missing, or of another JSON type ("id", "action", "reason" and "provider" strings;
 * "noticed_at" and "sent_at" RFC 3339 times; "deadline" a time or null, "detail" an object or
 * null, both optional). 0 when none; else a FIELD_* value, the field's name in *name. Printed,
 * a notice with "action": 7 or "deadline": "soon" was one the Python client drops. */
enum { FIELD_OK, FIELD_MISSING, FIELD_NOT_STRING, FIELD_NOT_TIME, FIELD_NOT_OBJECT };
static const char *const field_faults[] = {"", "\" is missing", "\" is not a string",
                                           "\" is not an RFC 3339 time", "\" is not an object"};
/* Seconds since 1970 of 0001-01-01T00:00:00Z and of 10000-01-01T00:00:00Z: Python's datetime
 * holds the years between, so a time whose UTC form falls outside is none to it. */
#define FIRST_SECOND (-62135596800.0)
#define PAST_LAST_SECOND 253402300800.0
static int field_problem(const char *body, size_t size, const char **name) {
    static const char *const keys[] = {"id",      "action",   "reason",   "provider",
                                       "noticed_at", "sent_at", "deadline", "detail"};
    const char *end = body + size;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const char *stop = NULL, *value = member(body, end, keys[i], &stop);
        int optional = i >= 6, is_time = i >= 4 && i <= 6;
        *name = keys[i];
        if (!value) {
            if (optional)
                continue;
            return FIELD_MISSING;
        }
        while (stop > value && stop[-1] && strchr(" \t\r\n", stop[-1]))
            stop--;
        if (optional && stop - value == 4 && memcmp(value, "null", 4) == 0)
            continue;
        if (i == 7) {
            if (*value != '{')
                return FIELD_NOT_OBJECT;
            continue;
        }
        size_t len;
        const char *text = string_at(value, end, &len);
        if (!text)
            return FIELD_NOT_STRING;
        if (!is_time)
            continue;
        double seconds;
        if (!json_time_seconds(text, len, &seconds) || seconds < FIRST_SECOND ||
            seconds >= PAST_LAST_SECOND)
            return FIELD_NOT_TIME;
    }
    return FIELD_OK;
}

/* One line on stderr for a dropped message, at most one a minute: a stream of them (an agent
 * of another protocol version sends every notice and a heartbeat a second) would bury the rest. */
#define DROPPED_SAY_EVERY 60.0
static void say_dropped(const char *topic, const char *why, const char *shown, int shown_len,
                        const char *then) {
    static double quiet_until = -1.0;
    static long unsaid = 0;
    double now = monotonic();
    if (quiet_until >= 0 && now < quiet_until) {
        unsaid++;
        return;
    }
    char more[64] = "";
    if (unsaid > 0)
        snprintf(more, sizeof more, " (%ld more since the last)", unsaid);
    /* `shown` is raw message text: a control character in it would break the line. */
    fprintf(stderr, "forewarn_sub: dropped a %s %s", topic, why);
    for (int i = 0; i < shown_len; i++)
        fputc((unsigned char)shown[i] < 0x20 || shown[i] == 0x7f ? '?' : shown[i], stderr);
    fprintf(stderr, "%s%s\n", then, more);
    unsaid = 0;
    quiet_until = now + DROPPED_SAY_EVERY;
}

typedef struct {
    id_set received;   /* active notices received here */
    id_set unreceived; /* listed by the last heartbeat, never received */
    double replay_asked;
    double settle_until; /* a restarted agent's heartbeats count from then (our clock) */
    /* And from RESTART_SETTLE after its first heartbeat's "sent_at" (its clock), if it had
     * one: on our clock alone, a subscriber stopped (SIGSTOP) just after that heartbeat read
     * the queued ones of the agent's first seconds after its own settle, and printed a clear
     * for a notice in force. */
    double settle_from;
    int settle_from_set;
    int replays;         /* --replays: print them too */
    long long last_seq;  /* of the last message of this agent, or -1 */
    long long gap_first, gap_last; /* seqs that never arrived, not yet asked for; or -1 */
    /* As the Python client keeps them: the gaps since the last heartbeat, the ids received
     * since the last jump in "seq", and after a restart the ids its replay brought until its
     * second heartbeat (restart_check), which asks for one it lists that did not come. */
    int gaps;
    id_set since_jump, restart_ids;
    int restart_check;
    char token[48];     /* of our "replay/<token>" subscription */
    int answered;       /* a heartbeat of this agent's "replay_for" named the token */
    double first_beat;  /* when this agent's first heartbeat was read, or 0 */
} tracker;

/* Whether the agent has yet to answer our subscriptions, as its heartbeat `body` says it will
 * (it has "replay_for"; an older agent's has not): not past REPLAY_ASK_EVERY after its first
 * heartbeat, in case the one naming the token was lost. `*replayed`: its replay to us has
 * come (after an earlier heartbeat naming the token; always so for an older agent). A
 * restarted agent answers the subscriptions the socket sends again when it reconnects. */
static int joining(tracker *t, const char *body, size_t size, int restarted, int *replayed) {
    const char *end = body + size, *stop;
    const char *p = member(body, end, "replay_for", &stop);
    double now = monotonic();
    size_t token_len = strlen(t->token);
    if (t->first_beat == 0 || restarted) {
        t->first_beat = now;
        t->answered = 0;
    }
    int waited = now - t->first_beat >= REPLAY_ASK_EVERY;
    *replayed = 1;
    if (!p || *p != '[')
        return 0;
    *replayed = t->answered || waited;
    p = skip_space(p + 1, stop);
    while (!t->answered && p < stop && *p == '"') {
        size_t len;
        const char *named = string_at(p, stop, &len);
        if (!named)
            break;
        if (len == token_len && memcmp(named, t->token, len) == 0)
            t->answered = 1;
        p = skip_space(named + len + 1, stop);
        if (p < stop && *p == ',')
            p = skip_space(p + 1, stop);
    }
    return !t->answered && !waited;
}

/* Note the message's "seq". The agent numbers every message it sends one after the other: a
 * change of a notice received already (a drain escalated to terminate) dropped past the
 * high-water marks leaves the heartbeats' "active" as it was, and only the gap tells. */
static int note_seq(tracker *t, const char *body, size_t size) {
    const char *end = body + size, *stop = NULL;
    const char *at = member(body, end, "seq", &stop);
    long long seq = 0;
    int skipped = 0;
    /* As protocol/seqgap.py reads it: an integer from 0 to LLONG_MAX, nothing else. Read up
     * to its first non-digit, 12.5 and 1e3 were 12 and 1, and the next message a gap. */
    if (!at || at >= stop || *at < '0' || *at > '9')
        return 0;
    for (; at < stop && *at >= '0' && *at <= '9'; at++) {
        int digit = *at - '0';
        if (seq > (LLONG_MAX - digit) / 10)
            return 0; /* past 64 bits: not a seq this agent sends */
        seq = seq * 10 + digit;
    }
    if (at < stop && (*at == '.' || *at == 'e' || *at == 'E'))
        return 0;
    if (t->last_seq >= 0 && seq > t->last_seq + 1) {
        if (t->gap_last < 0)
            t->gap_first = t->last_seq + 1;
        t->gap_last = seq - 1;
        t->gaps++;
        skipped = 1;
    }
    t->last_seq = seq;
    return skipped;
}

/* A notice's id joins those received since the last jump in "seq" (and since a restart). */
static void note_received(tracker *t, const char *body, size_t size, int jumped) {
    const char *end = body + size, *stop;
    size_t len;
    const char *id = string_at(member(body, end, "id", &stop), end, &len);
    if (jumped)
        set_clear(&t->since_jump);
    if (!id)
        return;
    set_add(&t->since_jump, id, len);
    if (t->restart_check)
        set_add(&t->restart_ids, id, len);
}

/* The detail key of the skew a provider's times were moved by: the agent sends nothing when
 * only it changes and keeps the new one for replays, so it is no part of a fingerprint. */
#define CLOCK_AHEAD "clock_ahead_seconds"

static unsigned long long hash_span(unsigned long long hash, const char *p, const char *stop) {
    for (; p && p < stop; p++)
        hash = (hash ^ (unsigned char)*p) * 1099511628211ULL;
    return hash;
}

/* How deep hash_value reads objects member by member; deeper, a value is hashed as written. */
#define HASH_DEPTH 64

/* The JSON value in [p, stop) as the Python client compares it: an object's members in any
 * order and spacing (their hashes summed), an array's items in order, less CLOCK_AHEAD at
 * the detail's top (`skip_clock`). Hashed as written, a detail the agent rebuilt with its
 * keys in another order was a changed notice here and printed again, where the Python
 * client's dict comparison saw the same one. Strings and numbers as written (the agent writes
 * each one way). Text this scanner cannot read, or nested past HASH_DEPTH, is hashed whole. */
static unsigned long long hash_value(unsigned long long hash, const char *p, const char *stop,
                                     int depth, int skip_clock) {
    const char *q = skip_space(p, stop);
    if (q >= stop)
        return hash_span(hash, p, stop);
    if ((*q != '{' && *q != '[') || depth >= HASH_DEPTH) {
        const char *last = stop;
        while (last > q && (last[-1] == ' ' || last[-1] == '\t' || last[-1] == '\r' ||
                            last[-1] == '\n'))
            last--;
        return hash_span(hash, q, last);
    }
    char close = *q == '{' ? '}' : ']';
    unsigned long long members = 0;
    q = skip_space(q + 1, stop);
    while (q < stop && *q != close) {
        unsigned long long item = 14695981039346656037ULL;
        int counted = 1;
        const char *value = q;
        if (close == '}') {
            const char *name = q + 1, *after = *q == '"' ? skip_string(q, stop) : NULL;
            const char *colon = after ? skip_space(after, stop) : NULL;
            if (!colon || colon >= stop || *colon != ':')
                return hash_span(hash, p, stop);
            size_t len = (size_t)(after - 1 - name);
            counted = !skip_clock || len != sizeof CLOCK_AHEAD - 1 ||
                      memcmp(name, CLOCK_AHEAD, len) != 0;
            item = (hash_span(item, q, after) ^ 0xfd) * 1099511628211ULL;
            value = skip_space(colon + 1, stop);
        }
        const char *value_end = skip_value(value, stop);
        if (!value_end)
            return hash_span(hash, p, stop);
        if (close == ']')
            hash = (hash_value(hash, value, value_end, depth + 1, 0) ^ 0xfb) * 1099511628211ULL;
        else if (counted)
            members += hash_value(item, value, value_end, depth + 1, 0);
        q = skip_space(value_end, stop);
        if (q < stop && *q == ',')
            q = skip_space(q + 1, stop);
    }
    if (q >= stop)
        return hash_span(hash, p, stop);
    hash = (hash ^ (unsigned char)close) * 1099511628211ULL;
    return (hash ^ members) * 1099511628211ULL;
}

/* The detail object in [p, stop), less CLOCK_AHEAD: after NTP's step a replay carried a new
 * skew alone, and each drain was printed again when a job joined. */
static unsigned long long hash_detail(unsigned long long hash, const char *p, const char *stop) {
    if (!p)
        return hash; /* no detail: as hash_span hashes none */
    return hash_value(hash, p, stop, 0, 1);
}

/* What makes a notice the same one sent again: its action, reason, deadline and detail (a
 * replay differs in seq and sent_at, in noticed_at after an agent restart, and in the
 * detail's CLOCK_AHEAD). FNV-1a. */
static unsigned long long fingerprint(const char *body, const char *end) {
    static const char *const keys[] = {"action", "reason", "deadline", "detail"};
    unsigned long long hash = 14695981039346656037ULL;
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        const char *stop = NULL, *value = member(body, end, keys[k], &stop);
        if (strcmp(keys[k], "detail") == 0)
            hash = hash_detail(hash, value, stop);
        else
            hash = hash_span(hash, value, stop);
        hash = (hash ^ 0xff) * 1099511628211ULL; /* a separator no JSON text holds */
    }
    return hash ? hash : 1;
}

/* Whether to print this notice: not when it is a replay of one printed already. */
static int on_notice(tracker *t, const char *body, size_t size) {
    const char *end = body + size, *stop;
    size_t id_len, action_len;
    const char *id = string_at(member(body, end, "id", &stop), end, &id_len);
    const char *action = string_at(member(body, end, "action", &stop), end, &action_len);
    if (!id || !action)
        return 1;
    if (key_is(action, action + action_len, "clear")) { /* escapes read, as Python does */
        set_remove(&t->received, id, id_len);
        return 1;
    }
    unsigned long long seen = fingerprint(body, end);
    long at = set_add(&t->received, id, id_len);
    if (at < 0)
        return 1; /* out of memory: printed every time rather than never */
    id_entry *entry = &t->received.items[at];
    if (entry->seen == seen && !t->replays)
        return 0;
    entry->seen = seen;
    free(entry->body);
    if ((entry->body = malloc(size + 1))) {
        memcpy(entry->body, body, size);
        entry->body[size] = '\0';
    }
    return 1;
}

/* The clear no agent will send for a notice withdrawn while we were not connected (across an
 * agent restart), as the Python client makes it: the notice printed last with action "clear",
 * "seq" that of the heartbeat that shows it gone (`beat_seq`, when past the notice's: with the
 * notice's own, a handler keeping the highest seq of each id kept the notice), noticed_at and
 * sent_at now, and detail.withdrawn saying why. Returns 1 when printed. */
static int print_withdrawn(const char *notice, long long beat_seq) {
    const char *end = notice + strlen(notice), *ends[6], *at[6];
    static const char *const keys[] = {"id", "seq", "reason", "provider", "deadline", "v"};
    for (int k = 0; k < 6; k++)
        if (!(at[k] = member(notice, end, keys[k], &ends[k])))
            return 0;
    long long own = 0;
    for (const char *d = at[1]; d < ends[1]; d++) {
        if (*d < '0' || *d > '9' || own > (LLONG_MAX - 9) / 10) {
            own = LLONG_MAX; /* not a seq this agent sends: keep it as printed */
            break;
        }
        own = own * 10 + (*d - '0');
    }
    char seq[24];
    int seq_len = (int)(ends[1] - at[1]);
    const char *seq_text = at[1];
    if (beat_seq > own) {
        seq_len = snprintf(seq, sizeof seq, "%lld", beat_seq);
        seq_text = seq;
    }
    struct timespec now;
    struct tm utc;
    char stamp[40];
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &utc);
    size_t n = strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &utc);
    snprintf(stamp + n, sizeof stamp - n, ".%03ldZ", now.tv_nsec / 1000000);
    printf("{\"v\":%.*s,\"id\":%.*s,\"seq\":%.*s,\"action\":\"clear\",\"reason\":%.*s,"
           "\"provider\":%.*s,\"deadline\":%.*s,\"noticed_at\":\"%s\",\"sent_at\":\"%s\","
           "\"detail\":{\"withdrawn\":\"no longer listed by the agent's heartbeat\"}}\n",
           (int)(ends[5] - at[5]), at[5], (int)(ends[0] - at[0]), at[0], seq_len, seq_text,
           (int)(ends[2] - at[2]), at[2], (int)(ends[3] - at[3]), at[3],
           (int)(ends[4] - at[4]), at[4], stamp, stamp);
    fflush(stdout);
    return 1;
}

/* Returns 1 when the agent should be asked to send its active notices again; `*printed`
 * counts the clears printed, at most `budget` (none when negative). `restarted`: this is the
 * first heartbeat of another agent than the last heard. */
static int on_heartbeat(tracker *t, const char *body, size_t size, long budget, long *printed,
                        int restarted) {
    const char *end = body + size, *stop;
    const char *p = member(body, end, "active", &stop);
    static id_set listed, unreceived; /* kept from one heartbeat to the next: their room */
    const char *missed = NULL;
    int replayed;
    int join_pending = joining(t, body, size, restarted, &replayed);
    set_clear(&listed);
    set_clear(&unreceived);
    if (!p || *p != '[')
        return 0;
    p = skip_space(p + 1, stop);
    while (p < stop && *p == '"') {
        size_t len;
        const char *id = string_at(p, stop, &len);
        /* A list not read whole says nothing of what is gone: no clear from it. */
        if (!id || set_add(&listed, id, len) < 0)
            return 0;
        p = skip_space(id + len + 1, stop);
        if (p < stop && *p == ',')
            p = skip_space(p + 1, stop);
    }
    /* A restarted agent replays every notice it lists to a client that reconnects: one its
     * second heartbeat lists that did not come since the jump to its mark was dropped (a
     * drain's escalation lost, then its replay of the terminate too: the gap was wiped at its
     * first heartbeat, and its heartbeats list the id received). */
    if (restarted) {
        set_clear(&t->restart_ids);
        for (size_t i = 0; i < t->since_jump.count; i++)
            set_add(&t->restart_ids, t->since_jump.items[i].id, t->since_jump.items[i].len);
        t->restart_check = 1;
    } else if (t->restart_check && replayed) {
        t->restart_check = 0;
        for (size_t i = 0; i < listed.count && !missed; i++)
            if (set_find(&t->restart_ids, listed.items[i].id, listed.items[i].len) < 0)
                missed = listed.items[i].id;
        set_clear(&t->restart_ids);
        if (missed && monotonic() - t->replay_asked >= REPLAY_ASK_EVERY) {
            t->replay_asked = monotonic();
            fprintf(stderr, "forewarn_sub: the restarted agent lists %s, whose replay never "
                    "arrived here; asking it to send the active notices again\n", missed);
            return 1;
        }
        missed = NULL;
    }
    /* A restarted agent lists the notices of its state file, but one published the instant
     * before it was killed may not be there yet: its heartbeats count after RESTART_SETTLE,
     * on our clock and on its own, as the Python client counts them. */
    if (monotonic() < t->settle_until)
        return 0;
    if (t->settle_from_set) {
        double sent;
        if (sent_at(body, size, &sent) && sent - t->settle_from < restart_settle)
            return 0;
        t->settle_from_set = 0;
    }
    /* Withdrawn while we were not connected: no clear will come, so print one. */
    for (size_t i = t->received.count; i-- > 0;) {
        const id_entry *gone = &t->received.items[i];
        if (set_find(&listed, gone->id, gone->len) >= 0)
            continue;
        if (gone->body && budget != 0 && print_withdrawn(gone->body, t->last_seq)) {
            ++*printed;
            --budget;
        }
        set_remove(&t->received, gone->id, gone->len);
    }
    for (size_t i = 0; i < listed.count; i++) {
        const id_entry *listed_id = &listed.items[i];
        if (set_find(&t->received, listed_id->id, listed_id->len) >= 0 || join_pending)
            continue;
        set_add(&unreceived, listed_id->id, listed_id->len);
        /* Two heartbeats in a row: a new subscriber's replay may come just after the first. */
        if (!missed && set_find(&t->unreceived, listed_id->id, listed_id->len) >= 0)
            missed = listed_id->id;
    }
    /* The last heartbeat's unreceived become ours; ours are cleared at the next one. */
    id_set last = t->unreceived;
    t->unreceived = unreceived;
    unreceived = last;
    if (!missed || monotonic() - t->replay_asked < REPLAY_ASK_EVERY)
        return 0;
    t->replay_asked = monotonic();
    fprintf(stderr, "forewarn_sub: the agent lists %s, never received here; asking it to send "
            "the active notices again\n", missed);
    return 1;
}

/* Text for one line of stderr: no control characters. */
static int printable(const char *body, size_t size) {
    if (size == 0)
        return 0;
    for (size_t i = 0; i < size; i++)
        if ((unsigned char)body[i] < 0x20 || body[i] == 0x7f)
            return 0;
    return 1;
}

/* A message made one line of JSON, in place. Tab, newline and carriage return between tokens
 * are JSON's whitespace: spaces here, the same JSON on one line. A raw control character in a
 * string, or any other, is not JSON (the Python client refuses it too): 0. DEL is a character
 * like any other to JSON; refused here, a notice Python took was dropped. */
static int one_line(char *body, size_t size) {
    int in_string = 0, escaped = 0;
    if (size == 0)
        return 0;
    for (size_t i = 0; i < size; i++) {
        unsigned char c = (unsigned char)body[i];
        if (in_string) {
            if (c < 0x20)
                return 0;
            if (escaped)
                escaped = 0;
            else if (c == '\\')
                escaped = 1;
            else if (c == '"')
                in_string = 0;
        } else if (c == '"') {
            in_string = 1;
        } else if (c == '\t' || c == '\n' || c == '\r') {
            body[i] = ' ';
        } else if (c < 0x20) {
            return 0;
        }
    }
    return 1;
}

/* Heartbeats tell a quiet agent from none at all: a wrong endpoint, or an agent not running,
 * is said on stderr instead of a silent wait. Listening goes on: ZeroMQ reconnects. */
typedef struct {
    char agent[256]; /* the last heartbeat's agent, "" before the first */
    double started, last_beat;
    int said_silent;
} liveness;

/* Returns 1 when the agent is another one than the last heard: it restarted. */
static int heard(liveness *l, const char *endpoint, const char *body, size_t size) {
    const char *end = body + size, *stop;
    char name[sizeof l->agent] = "?";
    size_t len;
    const char *agent = string_at(member(body, end, "agent", &stop), end, &len);
    if (agent && len < sizeof name && printable(agent, len)) {
        memcpy(name, agent, len);
        name[len] = '\0';
    }
    int restarted = l->agent[0] && strcmp(l->agent, name) != 0;
    if (l->said_silent)
        fprintf(stderr, "forewarn_sub: agent %s heard on %s\n", name, endpoint);
    else if (restarted)
        fprintf(stderr, "forewarn_sub: the agent on %s restarted (was %s, now %s)\n", endpoint,
                l->agent, name);
    memcpy(l->agent, name, sizeof name);
    l->last_beat = monotonic();
    l->said_silent = 0;
    return restarted;
}

static void check_silence(liveness *l, const char *endpoint) {
    double now = monotonic();
    if (l->said_silent)
        return;
    if (!l->agent[0] && now - l->started >= SILENT_AT_START) {
        fprintf(stderr, "forewarn_sub: no heartbeat on %s within %gs (is `forewarn agent` "
                "running?); still listening\n", endpoint, SILENT_AT_START);
        l->said_silent = 1;
    } else if (l->agent[0] && now - l->last_beat >= SILENT_LOST) {
        fprintf(stderr, "forewarn_sub: no heartbeat from agent %s on %s for %gs (stopped or "
                "restarting?); still listening\n", l->agent, endpoint, SILENT_LOST);
        l->said_silent = 1;
    }
}

/* Whether `endpoint` is tcp:// to an IPv6 address (tcp://[::1]:5555): ZeroMQ connects to one
 * only with ZMQ_IPV6 set, and without it waited there in silence. Only then: set for
 * tcp://localhost, a connect could pick ::1 while the agent listens on 127.0.0.1. */
static int ipv6_endpoint(const char *endpoint) {
    if (strncmp(endpoint, "tcp://", 6) != 0)
        return 0;
    const char *host = endpoint + 6, *port = strrchr(host, ':');
    return port && (host[0] == '[' || memchr(host, ':', (size_t)(port - host)) != NULL);
}

static int topic_is(zmq_msg_t *msg, const char *topic) {
    size_t len = strlen(topic);
    return zmq_msg_size(msg) == len && memcmp(zmq_msg_data(msg), topic, len) == 0;
}

int main(int argc, char **argv) {
    char endpoint[4096];
    long count = -1;
    int replays = 0;
    int by_default = 1;
    default_endpoint(endpoint, sizeof endpoint);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
            char *end = NULL;
            count = strtol(argv[++i], &end, 10);
            if (!end || *end || count <= 0) {
                fprintf(stderr, "forewarn_sub: --count needs a positive number, got %s\n", argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "--replays") == 0) {
            replays = 1;
        } else if (strcmp(argv[i], "--settle") == 0 && i + 1 < argc) {
            char *end = NULL;
            restart_settle = strtod(argv[++i], &end);
            /* Written so, NaN fails too: the settle would never end, nor begin. */
            if (!end || end == argv[i] || *end || !(restart_settle >= 0 && restart_settle <= 3600)) {
                fprintf(stderr, "forewarn_sub: --settle needs seconds from 0 to 3600, got %s\n",
                        argv[i]);
                return 2;
            }
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "usage: forewarn_sub [ENDPOINT] [--count N] [--replays] "
                    "[--settle SECONDS]\n");
            return 2;
        } else {
            snprintf(endpoint, sizeof endpoint, "%s", argv[i]);
            by_default = 0;
        }
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);

    void *context = zmq_ctx_new();
    void *sub = zmq_socket(context, ZMQ_SUB);
    int linger = 0, timeout_ms = 500;
    zmq_setsockopt(sub, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(sub, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
    if (ipv6_endpoint(endpoint)) {
        int on = 1;
        zmq_setsockopt(sub, ZMQ_IPV6, &on, sizeof on);
    }
    static tracker seen_ids; /* large: not on the stack */
    /* Subscribing to "notice" makes the agent replay every active notice to us at once; and
     * "replay/<token>", last, has it name our token in that replay's heartbeat. */
    zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "notice", 6);
    zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "heartbeat", 9);
    struct timespec started_at;
    clock_gettime(CLOCK_REALTIME, &started_at);
    snprintf(seen_ids.token, sizeof seen_ids.token, "c-%ld-%lx-%lx", (long)getpid(),
             (unsigned long)started_at.tv_sec, (unsigned long)started_at.tv_nsec);
    char replay_topic[64];
    snprintf(replay_topic, sizeof replay_topic, "replay/%s", seen_ids.token);
    zmq_setsockopt(sub, ZMQ_SUBSCRIBE, replay_topic, strlen(replay_topic));
    if (zmq_connect(sub, endpoint) != 0) {
        fprintf(stderr, "forewarn_sub: cannot connect to %s: %s\n", endpoint, zmq_strerror(errno));
        return 2;
    }
    fprintf(stderr, "forewarn_sub: listening on %s\n", endpoint);

    seen_ids.replay_asked = -REPLAY_ASK_EVERY;
    seen_ids.last_seq = seen_ids.gap_first = seen_ids.gap_last = -1;
    seen_ids.replays = replays;
    liveness agent = {.started = monotonic()};
    long seen = 0;
    double look_again = agent.started + LOOK_AGAIN_EVERY;
    while (!stopping && (count < 0 || seen < count)) {
        check_silence(&agent, endpoint);
        double now = monotonic();
        double quiet_since = agent.agent[0] ? agent.last_beat : agent.started;
        if (by_default && now >= look_again && now - quiet_since >= LOOK_AGAIN_EVERY) {
            char moved[sizeof endpoint];
            look_again = now + LOOK_AGAIN_EVERY;
            default_endpoint(moved, sizeof moved);
            if (strcmp(moved, endpoint) != 0 && zmq_connect(sub, moved) == 0) {
                zmq_disconnect(sub, endpoint);
                fprintf(stderr, "forewarn_sub: no agent on %s; listening on %s\n", endpoint,
                        moved);
                snprintf(endpoint, sizeof endpoint, "%s", moved);
                agent.started = now;
                agent.said_silent = 0;
            }
        }
        zmq_msg_t topic, body;
        zmq_msg_init(&topic);
        if (zmq_msg_recv(&topic, sub, 0) < 0) {
            zmq_msg_close(&topic);
            if (errno == EAGAIN || errno == EINTR)
                continue;
            fprintf(stderr, "forewarn_sub: receive failed: %s\n", zmq_strerror(errno));
            break;
        }
        /* Read the whole message, whatever its frame count: a forewarn message has two. */
        int frames = 1, more = zmq_msg_more(&topic);
        zmq_msg_init(&body);
        while (more) {
            zmq_msg_t part;
            zmq_msg_init(&part);
            if (zmq_msg_recv(&part, sub, 0) < 0) { /* cannot happen: a message comes whole */
                zmq_msg_close(&part);
                break;
            }
            more = zmq_msg_more(&part);
            if (++frames == 2)
                zmq_msg_move(&body, &part);
            zmq_msg_close(&part);
        }
        char *data = zmq_msg_data(&body);
        size_t size = zmq_msg_size(&body);
        const char *shown = NULL;
        int shown_len = 0, problem = 0;
        int is_notice = frames == 2 && topic_is(&topic, "notice");
        int is_heartbeat = frames == 2 && topic_is(&topic, "heartbeat");
        /* Not the integer 1: a notice of another protocol was printed as a v1 one, and its
         * heartbeat's "active" printed clears for every notice held here. */
        if ((is_notice || is_heartbeat) && !one_line(data, size)) {
            /* Said, not dropped in silence: the Python client names it too. */
            say_dropped(is_notice ? "notice" : "heartbeat",
                        size ? "that is not JSON: it holds a raw control character" : "that is empty",
                        NULL, 0, "");
        /* Checked first: with "v" named twice, which one is the version is the question. */
        } else if ((is_notice || is_heartbeat) &&
                   (problem = key_problem(data, size, &shown, &shown_len)) != 0) {
            if (problem == 2)
                say_dropped(is_notice ? "notice" : "heartbeat",
                            "nested too deeply (over " TEXT(MAX_DEPTH) " levels)", NULL, 0, "");
            else
                say_dropped(is_notice ? "notice" : "heartbeat", "that names the key \"", shown,
                            shown_len, "\" twice");
        } else if ((is_notice || is_heartbeat) && !version_1(data, size, &shown, &shown_len)) {
            say_dropped(is_notice ? "notice" : "heartbeat", "whose \"v\" is not the integer 1, got ",
                        shown, shown_len, "");
        } else if (is_notice && !seq_integer(data, size, &shown, &shown_len)) {
            say_dropped("notice", "whose \"seq\" is not an integer, got ", shown, shown_len, "");
        } else if (is_notice && (problem = field_problem(data, size, &shown)) != FIELD_OK) {
            say_dropped("notice", "whose field \"", shown, (int)strlen(shown),
                        field_faults[problem]);
        } else if (is_notice) {
            note_received(&seen_ids, data, size, note_seq(&seen_ids, data, size));
            if (on_notice(&seen_ids, data, size)) {
                fwrite(data, 1, size, stdout);
                fputc('\n', stdout);
                fflush(stdout);
                seen++;
            }
        } else if (is_heartbeat) {
            int restarted = heard(&agent, endpoint, data, size);
            if (note_seq(&seen_ids, data, size) && restarted)
                set_clear(&seen_ids.since_jump); /* the jump is here: none of its came before */
            if (restarted) {
                seen_ids.settle_until = monotonic() + restart_settle;
                seen_ids.settle_from_set = sent_at(data, size, &seen_ids.settle_from);
                /* A restarted agent numbers on from its reserved mark: that jump is no gap,
                 * but a second one since the last heartbeat is. */
                if (seen_ids.gaps < 2)
                    seen_ids.gap_first = seen_ids.gap_last = -1;
            }
            seen_ids.gaps = 0;
            int ask = on_heartbeat(&seen_ids, data, size, count < 0 ? -1 : count - seen, &seen,
                                   restarted);
            set_clear(&seen_ids.since_jump);
            if (!ask && seen_ids.gap_last >= 0 &&
                monotonic() - seen_ids.replay_asked >= REPLAY_ASK_EVERY) {
                fprintf(stderr, "forewarn_sub: %lld message(s) from the agent never arrived "
                        "here (seq %lld to %lld); asking it to send the active notices again\n",
                        seen_ids.gap_last - seen_ids.gap_first + 1, seen_ids.gap_first,
                        seen_ids.gap_last);
                seen_ids.replay_asked = monotonic();
                ask = 1;
            }
            if (ask) {
                seen_ids.gap_first = seen_ids.gap_last = -1;
                zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "notice", 6);
            }
        }
        zmq_msg_close(&topic);
        zmq_msg_close(&body);
    }
    zmq_close(sub);
    zmq_ctx_term(context);
    return 0;
}
