/* keeper.rpc._logscan: an eth_getLogs reply read straight from its bytes.
 *
 * Why it exists: json.loads builds a dict per log and validate_logs then checks
 * every field of it in Python; on a dense backfill that is most of the fetch
 * process's CPU (bench/README.md). This reads the common case in one pass and
 * builds the Log objects directly.
 *
 * What it takes: a reply object whose "id" is the request's, with no "error"
 * member and a "result" array of log objects; every byte ASCII; the fields the
 * indexer reads as plain strings (no escape) of the shapes keeper.rpc.validate
 * accepts; the logs in strictly rising (block, logIndex) order, inside the
 * range and from the addresses asked for. Other members, of any JSON shape,
 * are checked and passed over.
 *
 * Anything else (a key twice, an escape where a value is read, a removed log,
 * a field out of shape, logs out of order, a non-standard number, nesting
 * deeper than MAX_DEPTH) returns None: the caller then takes the generic path,
 * which accepts or refuses the body and names what is wrong. So this never
 * accepts a body the generic path refuses, and where both accept, their logs
 * are equal (tests/rpc/test_rpc_logscan.py).
 *
 * Every read is bounded by the buffer's end; nothing is written outside the
 * objects it creates.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#define MAX_DEPTH 64
#define MAX_TOPICS 4

/* 1 = done, 0 = not the common case (the caller answers None), -1 = a Python
 * exception is set (out of memory) */
#define OK 1
#define BAIL 0
#define FAIL (-1)

typedef struct {
    const unsigned char *p;
    const unsigned char *end;
} Cur;

static signed char HEX[256];

static void init_hex(void) {
    memset(HEX, -1, sizeof HEX);
    for (int i = 0; i < 10; i++) HEX['0' + i] = (signed char)i;
    for (int i = 0; i < 6; i++) {
        HEX['a' + i] = (signed char)(10 + i);
        HEX['A' + i] = (signed char)(10 + i);
    }
}

static inline void ws(Cur *c) {
    while (c->p < c->end &&
           (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static inline int eat(Cur *c, unsigned char ch) {
    ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A string with no escape, no control character and no byte past ASCII. */
static int plain_string(Cur *c, const unsigned char **s, Py_ssize_t *n) {
    ws(c);
    if (c->p >= c->end || *c->p != '"') return BAIL;
    const unsigned char *start = c->p + 1;
    for (const unsigned char *q = start; q < c->end; q++) {
        unsigned char ch = *q;
        if (ch == '"') {
            *s = start;
            *n = q - start;
            c->p = q + 1;
            return OK;
        }
        if (ch == '\\' || ch < 0x20 || ch >= 0x80) return BAIL;
    }
    return BAIL;
}

/* A string's raw contents up to the next quote, for a value whose every byte the caller
 * then checks as a hex digit: an escape, a control character or a byte past ASCII in it
 * fails that check, so it needs no scan of its own. */
static int hex_span(Cur *c, const unsigned char **s, Py_ssize_t *n) {
    ws(c);
    if (c->p >= c->end || *c->p != '"') return BAIL;
    const unsigned char *start = c->p + 1;
    const unsigned char *q = memchr(start, '"', (size_t)(c->end - start));
    if (q == NULL) return BAIL;
    *s = start;
    *n = q - start;
    c->p = q + 1;
    return OK;
}

static int literal(Cur *c, const char *word, Py_ssize_t n) {
    if (c->end - c->p < n || memcmp(c->p, word, (size_t)n) != 0) return BAIL;
    c->p += n;
    return OK;
}

/* Any JSON string of ASCII bytes, escapes included (checked, not decoded). */
static int skip_string(Cur *c) {
    const unsigned char *q = c->p + 1; /* past the opening quote */
    while (q < c->end) {
        unsigned char ch = *q;
        if (ch == '"') {
            c->p = q + 1;
            return OK;
        }
        if (ch < 0x20 || ch >= 0x80) return BAIL;
        if (ch == '\\') {
            if (c->end - q < 2) return BAIL;
            unsigned char e = q[1];
            if (e == 'u') {
                if (c->end - q < 6) return BAIL;
                for (int i = 2; i < 6; i++)
                    if (HEX[q[i]] < 0) return BAIL;
                q += 6;
                continue;
            }
            if (e != '"' && e != '\\' && e != '/' && e != 'b' && e != 'f' && e != 'n' &&
                e != 'r' && e != 't')
                return BAIL;
            q += 2;
            continue;
        }
        q++;
    }
    return BAIL;
}

static inline int at_digit(const Cur *c) { return c->p < c->end && *c->p >= '0' && *c->p <= '9'; }

/* A JSON number as RFC 8259 writes it (no NaN, no Infinity: those go the generic way). */
static int skip_number(Cur *c) {
    if (c->p < c->end && *c->p == '-') c->p++;
    if (!at_digit(c)) return BAIL;
    if (*c->p == '0') {
        c->p++;
    } else {
        while (at_digit(c)) c->p++;
    }
    if (c->p < c->end && *c->p == '.') {
        c->p++;
        if (!at_digit(c)) return BAIL;
        while (at_digit(c)) c->p++;
    }
    if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
        c->p++;
        if (c->p < c->end && (*c->p == '+' || *c->p == '-')) c->p++;
        if (!at_digit(c)) return BAIL;
        while (at_digit(c)) c->p++;
    }
    return OK;
}

static int skip_value(Cur *c, int depth);

static int skip_members(Cur *c, int depth) { /* after '{' */
    if (eat(c, '}')) return OK;
    for (;;) {
        ws(c);
        if (c->p >= c->end || *c->p != '"' || skip_string(c) != OK) return BAIL;
        if (!eat(c, ':') || skip_value(c, depth + 1) != OK) return BAIL;
        if (eat(c, ',')) continue;
        return eat(c, '}') ? OK : BAIL;
    }
}

static int skip_items(Cur *c, int depth) { /* after '[' */
    if (eat(c, ']')) return OK;
    for (;;) {
        if (skip_value(c, depth + 1) != OK) return BAIL;
        if (eat(c, ',')) continue;
        return eat(c, ']') ? OK : BAIL;
    }
}

static int skip_value(Cur *c, int depth) {
    if (depth > MAX_DEPTH) return BAIL;
    ws(c);
    if (c->p >= c->end) return BAIL;
    switch (*c->p) {
    case '"':
        return skip_string(c);
    case '{':
        c->p++;
        return skip_members(c, depth);
    case '[':
        c->p++;
        return skip_items(c, depth);
    case 't':
        return literal(c, "true", 4);
    case 'f':
        return literal(c, "false", 5);
    case 'n':
        return literal(c, "null", 4);
    default:
        return skip_number(c);
    }
}

/* The last raw text a field had, and the str made of it (borrowed: the memo keeps it). */
typedef struct {
    const unsigned char *s;
    Py_ssize_t n;
    PyObject *text;
} Last;

/* "0x" and exactly ``digits`` hex digits, as a lowercase str shared through ``memo``;
 * the same raw text as the field's last gives the same str without building it again
 * (a block's logs repeat its hash, a transaction's its hash, most logs the address). */
static int hex_text(PyObject *memo, Last *last, const unsigned char *s, Py_ssize_t n,
                    Py_ssize_t digits, PyObject **out) {
    if (last->text != NULL && last->n == n && memcmp(last->s, s, (size_t)n) == 0) {
        *out = Py_NewRef(last->text);
        return OK;
    }
    if (n != digits + 2 || s[0] != '0' || s[1] != 'x') return BAIL;
    PyObject *text = PyUnicode_New(n, 127);
    if (text == NULL) return FAIL;
    Py_UCS1 *w = PyUnicode_1BYTE_DATA(text);
    w[0] = '0';
    w[1] = 'x';
    for (Py_ssize_t i = 2; i < n; i++) {
        unsigned char ch = s[i];
        if (HEX[ch] < 0) {
            Py_DECREF(text);
            return BAIL;
        }
        w[i] = (Py_UCS1)(ch >= 'A' && ch <= 'F' ? ch + ('a' - 'A') : ch);
    }
    PyObject *shared = PyDict_SetDefault(memo, text, text); /* borrowed */
    if (shared == NULL) {
        Py_DECREF(text);
        return FAIL;
    }
    Py_INCREF(shared);
    Py_DECREF(text);
    last->s = s;
    last->n = n;
    last->text = shared;
    *out = shared;
    return OK;
}

/* A QUANTITY ("0x", 1 to 64 hex digits) that fits a signed 64-bit integer. */
static int quantity(const unsigned char *s, Py_ssize_t n, long long *out) {
    if (n < 3 || n > 66 || s[0] != '0' || s[1] != 'x') return BAIL;
    unsigned long long v = 0;
    for (Py_ssize_t i = 2; i < n; i++) {
        signed char d = HEX[s[i]];
        if (d < 0) return BAIL;
        if (v > (0x7fffffffffffffffULL >> 4)) return BAIL; /* past 2**63 - 1 */
        v = (v << 4) | (unsigned long long)d;
    }
    if (v > 0x7fffffffffffffffULL) return BAIL;
    *out = (long long)v;
    return OK;
}

/* "0x" and an even number of hex digits, as bytes. */
static int hex_data(const unsigned char *s, Py_ssize_t n, PyObject **out) {
    if (n < 2 || s[0] != '0' || s[1] != 'x' || (n & 1)) return BAIL;
    Py_ssize_t size = (n - 2) / 2;
    PyObject *raw = PyBytes_FromStringAndSize(NULL, size);
    if (raw == NULL) return FAIL;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(raw);
    for (Py_ssize_t i = 0; i < size; i++) {
        signed char hi = HEX[s[2 + 2 * i]], lo = HEX[s[3 + 2 * i]];
        if (hi < 0 || lo < 0) {
            Py_DECREF(raw);
            return BAIL;
        }
        w[i] = (unsigned char)((hi << 4) | lo);
    }
    *out = raw;
    return OK;
}

typedef struct {
    PyObject *log_type;
    PyObject *wanted;    /* set of lowercase addresses, or Py_None */
    PyObject *want_hash; /* lowercase block hash, or Py_None */
    long long from_block, to_block;
    PyObject *memo;   /* str -> the same str: one object per distinct hash or address */
    PyObject *logs;   /* list of Log */
    PyObject *stamps; /* block number -> its first log's raw blockTimestamp (or None) */
    long long last_block, last_index;
    PyObject *last_hash; /* borrowed from the previous Log's block hash */
    Last address, block_hash, tx_hash, topics[MAX_TOPICS];
} Scan;

enum {
    F_ADDRESS = 1 << 0,
    F_TOPICS = 1 << 1,
    F_DATA = 1 << 2,
    F_NUMBER = 1 << 3,
    F_BLOCK_HASH = 1 << 4,
    F_TX_HASH = 1 << 5,
    F_TX_INDEX = 1 << 6,
    F_LOG_INDEX = 1 << 7,
    F_REMOVED = 1 << 8,
    F_STAMP = 1 << 9,
    F_REQUIRED = (1 << 8) - 1,
};

static int key_is(const unsigned char *k, Py_ssize_t n, const char *name) {
    Py_ssize_t len = (Py_ssize_t)strlen(name);
    return n == len && memcmp(k, name, (size_t)len) == 0;
}

static int topics_array(Scan *st, Cur *c, PyObject **out) {
    PyObject *items[MAX_TOPICS];
    int count = 0, r = BAIL;
    if (!eat(c, '[')) return BAIL;
    if (!eat(c, ']')) {
        for (;;) {
            const unsigned char *s;
            Py_ssize_t n;
            if (count == MAX_TOPICS || hex_span(c, &s, &n) != OK) goto done;
            r = hex_text(st->memo, &st->topics[count], s, n, 64, &items[count]);
            if (r != OK) goto done;
            count++;
            r = BAIL;
            if (eat(c, ',')) continue;
            if (eat(c, ']')) break;
            goto done;
        }
    }
    *out = PyTuple_New(count);
    if (*out == NULL) {
        r = FAIL;
        goto done;
    }
    for (int i = 0; i < count; i++) PyTuple_SET_ITEM(*out, i, items[i]);
    return OK;
done:
    for (int i = 0; i < count; i++) Py_DECREF(items[i]);
    return r;
}

/* One log object, appended to st->logs when it passes every check. */
static int log_object(Scan *st, Cur *c) {
    PyObject *address = NULL, *topics = NULL, *data = NULL, *block_hash = NULL,
             *tx_hash = NULL, *stamp = NULL;
    long long number = 0, tx_index = 0, log_index = 0;
    unsigned seen = 0;
    int r = BAIL;
    if (!eat(c, '{')) return BAIL;
    if (eat(c, '}')) return BAIL; /* no fields */
    for (;;) {
        const unsigned char *k, *s;
        Py_ssize_t kn, n;
        unsigned flag = 0;
        r = BAIL;
        if (plain_string(c, &k, &kn) != OK || !eat(c, ':')) goto done;
        if (key_is(k, kn, "address")) flag = F_ADDRESS;
        else if (key_is(k, kn, "topics")) flag = F_TOPICS;
        else if (key_is(k, kn, "data")) flag = F_DATA;
        else if (key_is(k, kn, "blockNumber")) flag = F_NUMBER;
        else if (key_is(k, kn, "blockHash")) flag = F_BLOCK_HASH;
        else if (key_is(k, kn, "transactionHash")) flag = F_TX_HASH;
        else if (key_is(k, kn, "transactionIndex")) flag = F_TX_INDEX;
        else if (key_is(k, kn, "logIndex")) flag = F_LOG_INDEX;
        else if (key_is(k, kn, "removed")) flag = F_REMOVED;
        else if (key_is(k, kn, "blockTimestamp")) flag = F_STAMP;
        if (flag & seen) goto done; /* a key twice: JSON keeps the last, we do not guess */
        seen |= flag;
        switch (flag) {
        case 0:
            if (skip_value(c, 2) != OK) goto done;
            break;
        case F_TOPICS:
            if ((r = topics_array(st, c, &topics)) != OK) goto done;
            break;
        case F_REMOVED: /* only true marks a removed log; false and null say nothing */
            ws(c);
            if (literal(c, "false", 5) != OK && literal(c, "null", 4) != OK) goto done;
            break;
        case F_STAMP:
            ws(c);
            if (literal(c, "null", 4) == OK) break;
            if (plain_string(c, &s, &n) != OK) goto done;
            if ((stamp = PyUnicode_FromStringAndSize((const char *)s, n)) == NULL) {
                r = FAIL;
                goto done;
            }
            break;
        default:
            if (hex_span(c, &s, &n) != OK) goto done;
            if (flag == F_ADDRESS) r = hex_text(st->memo, &st->address, s, n, 40, &address);
            else if (flag == F_DATA) r = hex_data(s, n, &data);
            else if (flag == F_BLOCK_HASH)
                r = hex_text(st->memo, &st->block_hash, s, n, 64, &block_hash);
            else if (flag == F_TX_HASH) r = hex_text(st->memo, &st->tx_hash, s, n, 64, &tx_hash);
            else if (flag == F_NUMBER) r = quantity(s, n, &number);
            else if (flag == F_TX_INDEX) r = quantity(s, n, &tx_index);
            else r = quantity(s, n, &log_index);
            if (r != OK) goto done;
        }
        r = BAIL;
        if (eat(c, ',')) continue;
        if (eat(c, '}')) break;
        goto done;
    }
    r = BAIL;
    if ((seen & F_REQUIRED) != F_REQUIRED) goto done;
    /* the checks validate_logs makes across logs */
    if (number < st->from_block || number > st->to_block) goto done;
    if (st->want_hash != Py_None &&
        PyUnicode_Compare(block_hash, st->want_hash) != 0)
        goto done;
    if (st->wanted != Py_None) {
        int has = PySet_Contains(st->wanted, address);
        if (has < 0) {
            r = FAIL;
            goto done;
        }
        if (!has) goto done;
    }
    if (number < st->last_block || (number == st->last_block && log_index <= st->last_index))
        goto done; /* out of order or repeated: the generic path sorts and names it */
    if (number == st->last_block) {
        if (block_hash != st->last_hash && PyUnicode_Compare(block_hash, st->last_hash) != 0)
            goto done;
    } else {
        PyObject *key = PyLong_FromLongLong(number);
        if (key == NULL || PyDict_SetItem(st->stamps, key, stamp ? stamp : Py_None) < 0) {
            Py_XDECREF(key);
            r = FAIL;
            goto done;
        }
        Py_DECREF(key);
    }
    {
        PyObject *args[8] = {address, topics, data, NULL, block_hash, tx_hash, NULL, NULL};
        args[3] = PyLong_FromLongLong(number);
        args[6] = PyLong_FromLongLong(tx_index);
        args[7] = PyLong_FromLongLong(log_index);
        PyObject *log = NULL;
        if (args[3] && args[6] && args[7])
            log = PyObject_Vectorcall(st->log_type, args, 8, NULL);
        Py_XDECREF(args[3]);
        Py_XDECREF(args[6]);
        Py_XDECREF(args[7]);
        if (log == NULL || PyList_Append(st->logs, log) < 0) {
            Py_XDECREF(log);
            r = FAIL;
            goto done;
        }
        Py_DECREF(log);
    }
    st->last_block = number;
    st->last_index = log_index;
    st->last_hash = block_hash; /* the list's Log keeps it alive */
    r = OK;
done:
    Py_XDECREF(address);
    Py_XDECREF(topics);
    Py_XDECREF(data);
    Py_XDECREF(block_hash);
    Py_XDECREF(tx_hash);
    Py_XDECREF(stamp);
    return r;
}

static int logs_array(Scan *st, Cur *c) {
    if (!eat(c, '[')) return BAIL;
    if (eat(c, ']')) return OK;
    for (;;) {
        int r = log_object(st, c);
        if (r != OK) return r;
        if (eat(c, ',')) continue;
        return eat(c, ']') ? OK : BAIL;
    }
}

/* The request id: a JSON integer equal to ``expected`` (anything else goes the generic way). */
static int id_value(Cur *c, long long expected) {
    ws(c);
    if (!at_digit(c)) return BAIL;
    if (*c->p == '0' && c->end - c->p > 1 && c->p[1] >= '0' && c->p[1] <= '9') return BAIL;
    unsigned long long v = 0;
    int digits = 0;
    while (at_digit(c)) {
        if (++digits > 18) return BAIL;
        v = v * 10 + (unsigned long long)(*c->p - '0');
        c->p++;
    }
    if (c->p < c->end && (*c->p == '.' || *c->p == 'e' || *c->p == 'E')) return BAIL;
    return expected >= 0 && v == (unsigned long long)expected ? OK : BAIL;
}

static int reply_object(Scan *st, Cur *c, long long expected_id) {
    int have_id = 0, have_result = 0;
    if (!eat(c, '{')) return BAIL;
    if (eat(c, '}')) return BAIL;
    for (;;) {
        const unsigned char *k;
        Py_ssize_t kn;
        if (plain_string(c, &k, &kn) != OK || !eat(c, ':')) return BAIL;
        if (key_is(k, kn, "id")) {
            if (have_id++ || id_value(c, expected_id) != OK) return BAIL;
        } else if (key_is(k, kn, "result")) {
            if (have_result++) return BAIL;
            int r = logs_array(st, c);
            if (r != OK) return r;
        } else if (key_is(k, kn, "error")) {
            return BAIL;
        } else if (skip_value(c, 1) != OK) {
            return BAIL;
        }
        if (eat(c, ',')) continue;
        if (!eat(c, '}')) return BAIL;
        break;
    }
    ws(c);
    return have_id && have_result && c->p == c->end ? OK : BAIL;
}

PyDoc_STRVAR(scan_doc,
             "scan(body, expected_id, log_type, wanted, from_block, to_block, want_hash)\n"
             "--\n\n"
             "(logs, stamps) of a well-formed getLogs reply, or None for the generic path.");

static PyObject *scan(PyObject *module, PyObject *args) {
    Py_buffer body;
    long long expected_id;
    Scan st = {0};
    if (!PyArg_ParseTuple(args, "y*LOOLLO", &body, &expected_id, &st.log_type, &st.wanted,
                          &st.from_block, &st.to_block, &st.want_hash))
        return NULL;
    PyObject *result = NULL;
    if ((st.wanted != Py_None && !PyAnySet_Check(st.wanted)) ||
        (st.want_hash != Py_None && !PyUnicode_Check(st.want_hash))) {
        PyErr_SetString(PyExc_TypeError, "wanted must be a set and want_hash a str, or None");
        goto out;
    }
    st.memo = PyDict_New();
    st.logs = PyList_New(0);
    st.stamps = PyDict_New();
    st.last_block = -1;
    st.last_index = -1;
    if (st.memo == NULL || st.logs == NULL || st.stamps == NULL) goto out;
    Cur c = {(const unsigned char *)body.buf, (const unsigned char *)body.buf + body.len};
    int r = reply_object(&st, &c, expected_id);
    if (r == FAIL) goto out;
    if (r == BAIL) {
        result = Py_NewRef(Py_None);
        goto out;
    }
    result = PyTuple_Pack(2, st.logs, st.stamps);
out:
    Py_XDECREF(st.memo);
    Py_XDECREF(st.logs);
    Py_XDECREF(st.stamps);
    PyBuffer_Release(&body);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, scan_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_logscan", "An eth_getLogs reply read straight from its bytes.",
    -1, methods,
};

PyMODINIT_FUNC PyInit__logscan(void) {
    init_hex();
    return PyModule_Create(&module);
}
