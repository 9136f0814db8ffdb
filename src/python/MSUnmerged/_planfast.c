/* The planner's per-byte loops in C (optional: planlines.py holds the same in Python).
 *
 * runs(chunk, max_length): the chunk's same-directory runs, (directory, lines, line count), when
 *     every line is a canonical LFN of printable ASCII under /store/unmerged/ (names of 1..255
 *     bytes, not '.' or '..', lines of at most max_length bytes), else None; exactly what
 *     planlines.regex_runs accepts. A run's lines are a memoryview of the chunk (no copy).
 * names(prefix, block): the block's lines without `prefix` (a directory and its slash), which each
 *     of them must hold, followed by a name; how the spill stores a run (fewer bytes to write).
 * unique(prefix, names, examples): prefix + each name, without repeats (first occurrences, in
 *     order), and up to `examples` of the repeats.
 * line_end(block, n): the offset just after the block's n-th line (where a job file is cut).
 *
 * They release the GIL while they scan.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define UNMERGED "/store/unmerged/"
#define UNMERGED_LEN 16
#define MAX_NAME 255

typedef struct {
    Py_ssize_t start;    /* the run's first byte (its first line) */
    Py_ssize_t dir_len;  /* its directory's length, trailing slash included */
    Py_ssize_t end;      /* one past the last line's '\n' */
    Py_ssize_t lines;
} Run;

/* Every byte of s[0:len] is printable ASCII but space (0x21..0x7e). No early exit, so that the
 * compiler vectorises the loop. */
static int printable(const unsigned char *s, Py_ssize_t len)
{
    unsigned char bad = 0;
    for (Py_ssize_t i = 0; i < len; i++)
        bad |= (unsigned char)(s[i] - 0x21) > 0x7e - 0x21;
    return !bad;
}

/* The last '/' of s[0:len], or NULL. */
static const unsigned char *last_slash(const unsigned char *s, Py_ssize_t len)
{
    while (len > 0) {
        if (s[--len] == '/')
            return s + len;
    }
    return NULL;
}

/* Every component between the slashes of `dir` (which ends with '/') is non-empty and not '.' or
 * '..', and `dir` starts with /store/unmerged/. */
static int dir_ok(const unsigned char *dir, Py_ssize_t len)
{
    if (len < UNMERGED_LEN || memcmp(dir, UNMERGED, UNMERGED_LEN) != 0)
        return 0;
    Py_ssize_t start = 1;
    for (Py_ssize_t i = 1; i < len; i++) {
        if (dir[i] != '/')
            continue;
        Py_ssize_t n = i - start;
        if (n == 0 || (dir[start] == '.' && (n == 1 || (n == 2 && dir[start + 1] == '.'))))
            return 0;
        start = i + 1;
    }
    return 1;
}

/* Fills *out with the runs of buf[0:n]; returns their number, -1 for a refused chunk, -2 for no memory. */
static Py_ssize_t scan_runs(const unsigned char *buf, Py_ssize_t n, Py_ssize_t max_length, Run **out)
{
    Py_ssize_t cap = 64, count = 0, pos = 0;
    Run *runs = PyMem_RawMalloc(cap * sizeof(Run));
    if (runs == NULL)
        return -2;
    while (pos < n) {
        /* the chunk ends with '\n' (checked by the caller): every line has one */
        Py_ssize_t i = (const unsigned char *)memchr(buf + pos, '\n', n - pos) - buf;
        Py_ssize_t len = i - pos;
        Run *last = count ? &runs[count - 1] : NULL;
        /* The common case: the line is the current run's directory (checked with the run's first line) and a
         * name; only the name is left to check. */
        if (last != NULL && len > last->dir_len && len <= max_length &&
            memcmp(buf + last->start, buf + pos, last->dir_len) == 0 &&
            memchr(buf + pos + last->dir_len, '/', len - last->dir_len) == NULL) {
            const unsigned char *name_at = buf + pos + last->dir_len;
            Py_ssize_t name = len - last->dir_len;
            if (name > MAX_NAME || !printable(name_at, name) ||
                (name_at[0] == '.' && (name == 1 || (name == 2 && name_at[1] == '.'))))
                goto refused;
            last->end = i + 1;
            last->lines++;
            pos = i + 1;
            continue;
        }
        const unsigned char *slash_at = last_slash(buf + pos, len);
        if (slash_at == NULL || len > max_length || buf[pos] != '/' || !printable(buf + pos, len))
            goto refused;
        Py_ssize_t slash = slash_at - buf;
        Py_ssize_t name = i - slash - 1;
        if (name < 1 || name > MAX_NAME)
            goto refused;
        if (buf[slash + 1] == '.' && (name == 1 || (name == 2 && buf[slash + 2] == '.')))
            goto refused;
        Py_ssize_t dir_len = slash + 1 - pos;
        if (last != NULL && last->dir_len == dir_len && memcmp(buf + last->start, buf + pos, dir_len) == 0) {
            last->end = i + 1;
            last->lines++;
        } else {
            if (!dir_ok(buf + pos, dir_len))
                goto refused;
            if (count == cap) {
                cap *= 2;
                Run *grown = PyMem_RawRealloc(runs, cap * sizeof(Run));
                if (grown == NULL) {
                    PyMem_RawFree(runs);
                    return -2;
                }
                runs = grown;
            }
            runs[count].start = pos;
            runs[count].dir_len = dir_len;
            runs[count].end = i + 1;
            runs[count].lines = 1;
            count++;
        }
        pos = i + 1;
    }
    *out = runs;
    return count;
refused:
    PyMem_RawFree(runs);
    return -1;
}

static PyObject *planfast_runs(PyObject *self, PyObject *args)
{
    PyObject *chunk;  /* bytes, immutable: unchanged while the GIL is released */
    Py_ssize_t max_length;
    if (!PyArg_ParseTuple(args, "Sn:runs", &chunk, &max_length))
        return NULL;
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(chunk);
    Py_ssize_t n = PyBytes_GET_SIZE(chunk), count;
    Run *runs = NULL;
    if (n == 0 || buf[n - 1] != '\n')
        Py_RETURN_NONE;
    Py_BEGIN_ALLOW_THREADS
    count = scan_runs(buf, n, max_length, &runs);
    Py_END_ALLOW_THREADS
    PyObject *result = NULL, *view = NULL;
    if (count == -2) {
        PyErr_NoMemory();
    } else if (count == -1) {
        result = Py_NewRef(Py_None);
    } else if ((view = PyMemoryView_FromObject(chunk)) != NULL && (result = PyList_New(count)) != NULL) {
        /* Each run's lines are a view of the chunk (which it keeps alive), not a copy made holding the GIL. */
        for (Py_ssize_t k = 0; k < count; k++) {
            PyObject *lines = NULL, *run = NULL, *slice = NULL;
            PyObject *start = PyLong_FromSsize_t(runs[k].start), *stop = PyLong_FromSsize_t(runs[k].end);
            if (start != NULL && stop != NULL && (slice = PySlice_New(start, stop, NULL)) != NULL)
                lines = PyObject_GetItem(view, slice);
            Py_XDECREF(slice);
            Py_XDECREF(start);
            Py_XDECREF(stop);
            if (lines != NULL)
                run = Py_BuildValue("(y#Nn)", (const char *)buf + runs[k].start, runs[k].dir_len - 1, lines,
                                    runs[k].lines);
            if (run == NULL) {
                Py_CLEAR(result);
                break;
            }
            PyList_SET_ITEM(result, k, run);
        }
    }
    Py_XDECREF(view);
    PyMem_RawFree(runs);
    return result;
}

/* A hash of a line's last 64 bytes at most (the lines of one block mostly share their directory), eight bytes
 * at a time; equal lines are found by comparing them, so any spread serves. */
static uint64_t line_hash(const unsigned char *s, Py_ssize_t len)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (uint64_t)len, word;
    Py_ssize_t i = len > 64 ? len - 64 : 0;
    for (; i + 8 <= len; i += 8) {
        memcpy(&word, s + i, 8);
        h = (h ^ word) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    for (; i < len; i++)
        h = (h ^ s[i]) * 0x100000001b3ULL;
    return h ^ (h >> 29);
}

typedef struct {
    Py_ssize_t lines, repeats;
    Py_ssize_t *starts;  /* per line: its first byte */
    Py_ssize_t *ends;    /* per line: its '\n' */
    unsigned char *seen_before;  /* per line: 1 when an earlier line is equal */
} Lines;

/* Splits buf[0:n] (which ends with '\n') into lines and marks the repeats; 0, or -1 for no memory. */
static int mark_repeats(const unsigned char *buf, Py_ssize_t n, Lines *L)
{
    Py_ssize_t lines = 0;
    for (const unsigned char *p = buf, *end = buf + n; (p = memchr(p, '\n', end - p)) != NULL; p++)
        lines++;
    Py_ssize_t size = 16;
    while (size < 2 * lines)
        size *= 2;
    L->lines = lines;
    L->repeats = 0;
    L->starts = PyMem_RawMalloc((lines + 1) * sizeof(Py_ssize_t));
    L->ends = PyMem_RawMalloc((lines + 1) * sizeof(Py_ssize_t));
    L->seen_before = PyMem_RawCalloc(lines + 1, 1);
    Py_ssize_t *table = PyMem_RawMalloc(size * sizeof(Py_ssize_t));
    if (L->starts == NULL || L->ends == NULL || L->seen_before == NULL || table == NULL) {
        PyMem_RawFree(table);
        return -1;
    }
    memset(table, 0xff, size * sizeof(Py_ssize_t));  /* -1: empty slot */
    Py_ssize_t pos = 0;
    for (Py_ssize_t k = 0; k < lines; k++) {
        const unsigned char *eol = memchr(buf + pos, '\n', n - pos);
        Py_ssize_t len = eol - (buf + pos);
        L->starts[k] = pos;
        L->ends[k] = pos + len;
        Py_ssize_t slot = (Py_ssize_t)(line_hash(buf + pos, len) & (uint64_t)(size - 1));
        for (;;) {
            Py_ssize_t other = table[slot];
            if (other < 0) {
                table[slot] = k;
                break;
            }
            if (L->ends[other] - L->starts[other] == len && memcmp(buf + L->starts[other], buf + pos, len) == 0) {
                L->seen_before[k] = 1;
                L->repeats++;
                break;
            }
            slot = (slot + 1) & (size - 1);
        }
        pos += len + 1;
    }
    PyMem_RawFree(table);
    return 0;
}

/* Copies the names of buf[0:n] (lines, each prefix[0:plen] + a name without '/') to out; returns
 * the bytes written, or -1 when a line is not prefix + name. */
static Py_ssize_t strip_prefix(const unsigned char *buf, Py_ssize_t n, const unsigned char *prefix, Py_ssize_t plen,
                               unsigned char *out)
{
    Py_ssize_t pos = 0, used = 0;
    while (pos < n) {
        Py_ssize_t eol = (const unsigned char *)memchr(buf + pos, '\n', n - pos) - buf;
        Py_ssize_t name = eol - pos - plen;
        if (name < 1 || memcmp(buf + pos, prefix, plen) != 0 || memchr(buf + pos + plen, '/', name) != NULL)
            return -1;
        memcpy(out + used, buf + pos + plen, name + 1);
        used += name + 1;
        pos = eol + 1;
    }
    return used;
}

static PyObject *planfast_names(PyObject *self, PyObject *args)
{
    PyObject *prefix;
    Py_buffer block;  /* read-only views of immutable bytes (a run of a chunk): unchanged without the GIL */
    if (!PyArg_ParseTuple(args, "Sy*:names", &prefix, &block))
        return NULL;
    const unsigned char *buf = (const unsigned char *)block.buf;
    Py_ssize_t n = block.len, used;
    PyObject *out = NULL;
    if (n && buf[n - 1] != '\n') {
        PyErr_SetString(PyExc_ValueError, "names() takes whole lines, each ending with '\\n'");
        goto done;
    }
    if ((out = PyBytes_FromStringAndSize(NULL, n)) == NULL)
        goto done;
    Py_BEGIN_ALLOW_THREADS
    used = strip_prefix(buf, n, (const unsigned char *)PyBytes_AS_STRING(prefix), PyBytes_GET_SIZE(prefix),
                        (unsigned char *)PyBytes_AS_STRING(out));
    Py_END_ALLOW_THREADS
    if (used < 0) {
        Py_CLEAR(out);
        PyErr_SetString(PyExc_ValueError, "names(): a line is not the directory's prefix followed by a name");
    } else {
        _PyBytes_Resize(&out, used);  /* NULL and an exception set when it fails */
    }
done:
    PyBuffer_Release(&block);
    return out;
}

static PyObject *planfast_unique(PyObject *self, PyObject *args)
{
    PyObject *prefix_obj, *arg;
    Py_ssize_t max_examples;
    if (!PyArg_ParseTuple(args, "SSn:unique", &prefix_obj, &arg, &max_examples))
        return NULL;
    const char *prefix = PyBytes_AS_STRING(prefix_obj);
    Py_ssize_t plen = PyBytes_GET_SIZE(prefix_obj);
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(arg);
    Py_ssize_t n = PyBytes_GET_SIZE(arg);
    if (n && buf[n - 1] != '\n') {
        PyErr_SetString(PyExc_ValueError, "unique() takes whole lines, each ending with '\\n'");
        return NULL;
    }
    Lines L = {0, 0, NULL, NULL, NULL};
    int failed;
    Py_BEGIN_ALLOW_THREADS
    failed = mark_repeats(buf, n, &L);
    Py_END_ALLOW_THREADS
    PyObject *block = NULL, *examples = NULL, *result = NULL;
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    if ((examples = PyList_New(0)) == NULL)
        goto done;
    Py_ssize_t kept_bytes = 0;
    for (Py_ssize_t k = 0; k < L.lines; k++) {
        if (!L.seen_before[k])
            kept_bytes += L.ends[k] - L.starts[k] + 1;
        else if (PyList_GET_SIZE(examples) < max_examples) {
            PyObject *line = PyBytes_FromStringAndSize(NULL, plen + L.ends[k] - L.starts[k]);
            if (line == NULL)
                goto done;
            memcpy(PyBytes_AS_STRING(line), prefix, plen);
            memcpy(PyBytes_AS_STRING(line) + plen, buf + L.starts[k], L.ends[k] - L.starts[k]);
            int appended = PyList_Append(examples, line);
            Py_DECREF(line);
            if (appended < 0)
                goto done;
        }
    }
    if (L.repeats == 0 && plen == 0) {
        block = Py_NewRef(arg);
    } else {
        block = PyBytes_FromStringAndSize(NULL, kept_bytes + plen * (L.lines - L.repeats));
        if (block == NULL)
            goto done;
        char *out = PyBytes_AS_STRING(block);
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t k = 0; k < L.lines; k++) {
            if (L.seen_before[k])
                continue;
            Py_ssize_t len = L.ends[k] - L.starts[k] + 1;
            memcpy(out, prefix, plen);
            memcpy(out + plen, buf + L.starts[k], len);
            out += plen + len;
        }
        Py_END_ALLOW_THREADS
    }
    result = Py_BuildValue("(OnnO)", block, L.lines - L.repeats, L.repeats, examples);
done:
    Py_XDECREF(block);
    Py_XDECREF(examples);
    PyMem_RawFree(L.starts);
    PyMem_RawFree(L.ends);
    PyMem_RawFree(L.seen_before);
    return result;
}

static PyObject *planfast_line_end(PyObject *self, PyObject *args)
{
    Py_buffer block;
    Py_ssize_t lines, pos = 0;
    if (!PyArg_ParseTuple(args, "y*n:line_end", &block, &lines))
        return NULL;
    const char *buf = block.buf;
    for (Py_ssize_t k = 0; k < lines && pos >= 0; k++) {
        const char *eol = pos < block.len ? memchr(buf + pos, '\n', block.len - pos) : NULL;
        pos = eol != NULL ? eol - buf + 1 : -1;
    }
    PyBuffer_Release(&block);
    if (pos < 0 || lines < 0) {
        PyErr_SetString(PyExc_ValueError, "line_end(): the block holds fewer lines than asked");
        return NULL;
    }
    return PyLong_FromSsize_t(pos);
}

static PyMethodDef methods[] = {
    {"runs", planfast_runs, METH_VARARGS,
     "runs(chunk, max_length) -> [(directory, lines, count), ...] when every line is a plain canonical LFN, else None"},
    {"names", planfast_names, METH_VARARGS, "names(prefix, block) -> the block's lines without their common prefix"},
    {"unique", planfast_unique, METH_VARARGS,
     "unique(prefix, names, examples) -> (prefix + each name without repeats, names kept, repeats, the first "
     "`examples` repeats)"},
    {"line_end", planfast_line_end, METH_VARARGS, "line_end(block, n) -> the offset just after the block's n-th line"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_planfast", "The planner's per-byte loops in C.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__planfast(void)
{
    return PyModule_Create(&module);
}
