/* The C half of the sandbox's audit hook (zygote.py, layer 3), for CPython 3.11.

   The hook itself is Python (zygote._audit_hook), and so is the stand-in for sys._getframe
   (zygote._caller_module). Called as they are, each costs a frame of the stack that stock Python
   does not spend, so a recursion that makes an audited call at each level (array.array, id,
   namedtuple, typing.TypeVar) ended a level or more before stock's: a tell of the sandbox, and a
   gold stock Python disagrees with (red team round 23). Here both are called from C with room:
   the thread's recursion counter is raised by ROOM for the call and lowered after it, and the
   collector waits, so their frames count against nothing the program can reach and no program
   code runs in that room. The hook is installed with PySys_AddAuditHook (no Python code can list
   or remove it), once. disguise() makes the builtins that stand in for refused ones (zygote's
   _stand_in), which read as the originals do.

   Built by isolation.build_audit_hook() in the calling process (cc, Python's headers), loaded by
   a model zygote before it hides the file system. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030C0000
#error "audithook.c reads CPython 3.11's thread state (recursion_remaining); 3.12 split it in two"
#endif

/* frames the Python halves may use beyond the program's limit (stock keeps 50 for its errors) */
#define ROOM 50

static PyObject *hook;        /* zygote's audit hook: hook(event, args) */
static PyObject *lookup;      /* zygote's sys._getframe stand-in: lookup(depth) */

/* fn(*args) with ROOM more frames of recursion allowed while it runs, and no collection: one
   started by its allocations would run a program's code (a generator's finally block) with the
   room (red team round 24); the next allocation after it collects instead */
static PyObject *
with_room(PyObject *fn, PyObject *const *args, Py_ssize_t nargs)
{
    PyThreadState *ts = PyThreadState_Get();
    int collecting = PyGC_Disable();
    ts->recursion_remaining += ROOM;
    PyObject *result = PyObject_Vectorcall(fn, args, nargs, NULL);
    ts->recursion_remaining -= ROOM;
    if (collecting) {
        PyGC_Enable();
    }
    return result;
}

static int
audit(const char *event, PyObject *args, void *data)
{
    (void)data;
    PyObject *name = PyUnicode_FromString(event);
    if (name == NULL) {
        return -1;
    }
    PyObject *pair[2] = {name, args};
    PyObject *result = with_room(hook, pair, 2);
    Py_DECREF(name);
    if (result == NULL) {
        return -1;
    }
    Py_DECREF(result);
    return 0;
}

/* sys._getframe([depth]) as stock parses it (a C int, at most one argument, no keywords), then
   the stand-in */
static PyObject *
getframe(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs > 1) {
        PyErr_Format(PyExc_TypeError, "_getframe expected at most 1 argument, got %zd", nargs);
        return NULL;
    }
    int depth = 0;
    if (nargs == 1) {
        depth = _PyLong_AsInt(args[0]);
        if (depth == -1 && PyErr_Occurred()) {
            return NULL;
        }
    }
    PyObject *number = PyLong_FromLong(depth);
    if (number == NULL) {
        return NULL;
    }
    PyObject *result = with_room(lookup, &number, 1);
    Py_DECREF(number);
    return result;
}

static PyMethodDef getframe_def = {"_getframe", (PyCFunction)(void (*)(void))getframe,
                                   METH_FASTCALL, NULL};

/* install(hook, lookup, sys) -> the new sys._getframe, a builtin of the sys module with stock's
   name and docstring; once per process */
static PyObject *
install(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (hook != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the audit hook is installed already");
        return NULL;
    }
    if (nargs != 3 || !PyCallable_Check(args[0]) || !PyCallable_Check(args[1])
            || !PyModule_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "install(hook, lookup, sys)");
        return NULL;
    }
    PyObject *stock = PyObject_GetAttrString(args[2], "_getframe");
    if (stock == NULL) {
        return NULL;
    }
    /* the method definition's docstring as the clinic writes it: "_getframe" + its signature,
       "\n--\n\n", the text; kept for the life of the process, as is the definition */
    PyObject *doc = PyObject_GetAttrString(stock, "__doc__");
    PyObject *signature = PyObject_GetAttrString(stock, "__text_signature__");
    Py_DECREF(stock);
    if (doc == NULL || signature == NULL) {
        Py_XDECREF(doc);
        Py_XDECREF(signature);
        return NULL;
    }
    if (PyUnicode_Check(doc) && PyUnicode_Check(signature)) {
        PyObject *text = PyUnicode_FromFormat("_getframe%U\n--\n\n%U", signature, doc);
        if (text == NULL) {
            Py_DECREF(doc);
            Py_DECREF(signature);
            return NULL;
        }
        getframe_def.ml_doc = strdup(PyUnicode_AsUTF8(text));
        Py_DECREF(text);
    }
    Py_DECREF(doc);
    Py_DECREF(signature);
    PyObject *name = PyModule_GetNameObject(args[2]);
    if (name == NULL) {
        return NULL;
    }
    PyObject *stand_in = PyCFunction_NewEx(&getframe_def, args[2], name);
    Py_DECREF(name);
    if (stand_in == NULL) {
        return NULL;
    }
    Py_INCREF(args[0]);
    Py_INCREF(args[1]);
    hook = args[0];
    lookup = args[1];
    if (PySys_AddAuditHook(audit, NULL) < 0) {
        Py_DECREF(stand_in);
        return NULL;
    }
    return stand_in;
}

/* a disguise's call: self is the module object made for it (disguise), which holds `refuse` */
static PyObject *
refused(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    (void)args;
    (void)nargs;
    (void)kwnames;
    PyObject *refuse = PyObject_GetAttrString(self, "refuse");
    if (refuse == NULL) {
        return NULL;
    }
    /* with room, so that a call at the edge of the recursion limit is still a refusal */
    PyObject *result = with_room(refuse, NULL, 0);
    Py_DECREF(refuse);
    return result;
}

/* disguise(original, refuse) -> a builtin that stands in for the builtin function `original`
   (abc.get_cache_token, the clock queue reads): its name, qualified name, module, docstring and
   text signature, and a call of it calls refuse() (which raises). Its __self__, which the screen
   refuses to name, is a module object of the original's module name holding refuse alone, so
   nothing on it leads to what the original's __self__ holds. */
static PyObject *
disguise(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2 || !PyCFunction_Check(args[0]) || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "disguise(builtin function, refuse)");
        return NULL;
    }
    PyObject *name = PyObject_GetAttrString(args[0], "__name__");
    PyObject *owner = PyObject_GetAttrString(args[0], "__module__");
    PyObject *doc = PyObject_GetAttrString(args[0], "__doc__");
    PyObject *signature = PyObject_GetAttrString(args[0], "__text_signature__");
    PyObject *text = NULL, *holder = NULL, *result = NULL;
    PyMethodDef *definition = NULL;
    if (name == NULL || owner == NULL || doc == NULL || signature == NULL
            || !PyUnicode_Check(name) || !PyUnicode_Check(owner)) {
        PyErr_SetString(PyExc_TypeError, "disguise: a builtin with a name and a module");
        goto done;
    }
    /* the docstring as the method definition holds it (see install) */
    if (PyUnicode_Check(doc) && PyUnicode_Check(signature)) {
        text = PyUnicode_FromFormat("%U%U\n--\n\n%U", name, signature, doc);
    }
    else if (PyUnicode_Check(doc)) {
        text = Py_NewRef(doc);
    }
    else {
        text = PyUnicode_FromString("");
    }
    holder = PyModule_NewObject(owner);
    definition = PyMem_Calloc(1, sizeof(PyMethodDef));
    if (text == NULL || holder == NULL || definition == NULL
            || PyModule_AddObjectRef(holder, "refuse", args[1]) < 0) {
        goto done;
    }
    /* kept for the life of the process, as the definition that points to them */
    definition->ml_name = strdup(PyUnicode_AsUTF8(name));
    definition->ml_doc = PyUnicode_GET_LENGTH(text) ? strdup(PyUnicode_AsUTF8(text)) : NULL;
    definition->ml_meth = (PyCFunction)(void (*)(void))refused;
    definition->ml_flags = METH_FASTCALL | METH_KEYWORDS;
    result = PyCFunction_NewEx(definition, holder, owner);
    if (result != NULL) {
        definition = NULL;
    }
done:
    PyMem_Free(definition);
    Py_XDECREF(name);
    Py_XDECREF(owner);
    Py_XDECREF(doc);
    Py_XDECREF(signature);
    Py_XDECREF(text);
    Py_XDECREF(holder);
    return result;
}

static PyMethodDef methods[] = {
    {"install", (PyCFunction)(void (*)(void))install, METH_FASTCALL,
     "install(hook, lookup, sys) -> sys._getframe's stand-in; installs the audit hook for good"},
    {"disguise", (PyCFunction)(void (*)(void))disguise, METH_FASTCALL,
     "disguise(original, refuse) -> a builtin that looks like original and calls refuse()"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef definition = {
    PyModuleDef_HEAD_INIT, "audithook", "The C half of the sandbox's audit hook.", -1, methods,
};

PyMODINIT_FUNC
PyInit_audithook(void)
{
    return PyModule_Create(&definition);
}
