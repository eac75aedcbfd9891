/* graph — the IR every model family emits and both the exporter and the executor consume.
 *
 * A graph is values and nodes. A value has a name, a dtype and a shape whose dims are known
 * numbers or unknown (-1) until run time; graph inputs and outputs may name their unknown dims
 * symbolically ("batch", "sequence") for export. Initializers are values with data: a view into
 * the mmapped checkpoint (never copied while building; the CPU prepare pass copies what it runs,
 * graph/prepare.h) or bytes owned by the graph's arena. Nodes are ONNX /
 * com.microsoft operators: op type, domain, attributes, and ordered inputs/outputs where an
 * absent optional slot is -1 (an empty name in ONNX).
 *
 * Building is append-only and sticky-error: after the first failure every builder call is a
 * no-op returning -1 and graph_status() reports the first error (so a builder reads like a
 * forward pass without checking every line). graph_finalize() resolves every node's op contract
 * (src/ops/op.h) and runs static inference: arity, dtypes and ranks are checked at build time and
 * a violation is a typed error naming the node.
 *
 * The graph owns all its strings and arrays (one arena). It never runs kernels.
 */
#ifndef PH_GRAPH_GRAPH_H
#define PH_GRAPH_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "base/arena.h"
#include "base/diag.h"
#include "tensor/quant.h"
#include "tensor/tensor.h"

#define GRAPH_MAX_DIMS    TENSOR_MAX_DIMS
#define GRAPH_MAX_IO      24 /* inputs or outputs per node (PagedAttention has 17 inputs) */
#define GRAPH_MAX_SYMBOLS 16

typedef enum value_kind {
  VALUE_INTERMEDIATE = 0,
  VALUE_INPUT = 1,
  VALUE_INITIALIZER = 2,
} value_kind;

/* Static type of a value, also used for run-time shapes (then every dim is known).
 * dims[i] == -1: unknown at build time. */
typedef struct tinfo {
  ph_dtype dtype; /* PH_DTYPE_INVALID for an absent optional input */
  int rank;       /* -1: unknown rank */
  int64_t dims[GRAPH_MAX_DIMS];
  const void *data; /* constant contents when known (initializers), else NULL */
} tinfo;

typedef struct gvalue {
  const char *name;
  value_kind kind;
  tinfo type;                 /* for initializers: full shape + data */
  int8_t sym[GRAPH_MAX_DIMS]; /* inputs/outputs: symbol id per dim or -1 */
  int is_output;
  int producer;    /* node index, -1 for inputs/initializers */
  int64_t n_bytes; /* initializers: data bytes */
  int owned;       /* initializers: data lives in the graph arena or its resident weight copy */
  /* Lazy initializer: the value (type.dtype, type.dims) is computed from `src`, src_dtype
   * elements of the checkpoint, by converting to type.dtype and, when src_transposed, reading
   * the source as [rows, cols] = [type.dims[1], type.dims[0]] (what ONNX MatMul wants is the
   * transpose of a Hugging Face [out, in] weight). type.data stays NULL until someone needs the
   * canonical bytes (graph_initializer_data); the exporter streams them, the CPU prepare pass
   * reads src directly. */
  const void *src;
  ph_dtype src_dtype;
  int src_transposed;
  int lazy;
  /* Lazy quantized (graph_add_initializer_quant): one of the three MatMulNBits tensors of the
   * weight [quant_rows, quant_cols] at src (src_dtype, row-major [N, K] as Hugging Face stores
   * it), computed row by row with tensor/quant.h under `quant` when someone reads it.
   * GRAPH_QUANT_NONE for every other initializer. */
  int quant_part; /* graph_quant_part */
  quant_params quant;
  int64_t quant_rows, quant_cols;
} gvalue;

/* Which of MatMulNBits' inputs a lazy quantized initializer holds (tensor/quant.h's layout):
 * B uint8 [N, kb, block*bits/8], scales [N*kb] in quant.scale_dtype, zero points uint8
 * [N*ceil(kb*bits/8)] (asymmetric only). */
typedef enum graph_quant_part {
  GRAPH_QUANT_NONE = 0,
  GRAPH_QUANT_B = 1,
  GRAPH_QUANT_SCALES = 2,
  GRAPH_QUANT_ZP = 3,
} graph_quant_part;

typedef enum attr_type {
  ATTR_INT = 0,
  ATTR_FLOAT = 1,
  ATTR_STRING = 2,
  ATTR_INTS = 3,
  ATTR_FLOATS = 4,
} attr_type;

typedef struct gattr {
  const char *name;
  attr_type type;
  int64_t i;
  float f;
  const char *s;
  const int64_t *ints;
  const float *floats;
  int n; /* elements of ints/floats */
} gattr;

struct op_def;

typedef struct gnode {
  const char *name;
  const char *op_type;
  const char *domain; /* "" for ai.onnx, "com.microsoft" */
  int n_inputs, n_outputs, n_attrs;
  int *inputs; /* value ids, -1 = absent optional */
  int *outputs;
  gattr *attrs;
  const struct op_def *op; /* resolved by graph_finalize() */
  int internal;            /* made by a CPU prepare pass: never exported */
  int dead;                /* removed by a prepare pass (outputs unused): skipped */
} gnode;

typedef struct graph {
  arena arena;
  gvalue *values;
  int n_values, cap_values;
  gnode *nodes;
  int n_nodes, cap_nodes;
  int *inputs; /* graph inputs in declaration order */
  int n_inputs, cap_inputs;
  int *outputs; /* graph outputs in declaration order */
  int n_outputs, cap_outputs;
  char symbols[GRAPH_MAX_SYMBOLS][32];
  int n_symbols;
  /* value ids by name: open addressing, linear probing, load <= 1/2; -1 empty, -2 a name
   * renamed away. Keeps graph_find_value, and with it every graph_add_* (which refuses a name
   * defined twice), O(1): a linear scan made reading a 1.8 MB model of 80,000 nodes take 9 s. */
  int *name_slots;
  int name_cap, name_used; /* slots; slots holding an id or a tombstone */
  diag err;                /* sticky: first builder error */
  int finalized;
  struct fmap *mappings; /* adopted file mappings, unmapped by graph_free */
  int n_mappings;
  struct fmap *borrowed; /* file mappings owned elsewhere that views may point into */
  int n_borrowed;
  void *resident;        /* the weight copy (graph_prepare_cpu, prepare.h): initializers */
  size_t resident_bytes; /* point into it; pages_free_huge'd by graph_free */
} graph;

/* ---- lifecycle ---- */
ph_status graph_create(graph **out, diag *d);
void graph_free(graph *g); /* NULL-safe */
ph_status graph_status(const graph *g);

/* ---- building (sticky errors; every call returns a value id or -1) ---- */

/* Graph input. dims: -1 for a dim known only at run time; sym_names (may be NULL) names such
 * dims for export ("batch_size"); NULL entries mean anonymous. */
int graph_add_input(graph *g, const char *name, ph_dtype dtype, int rank, const int64_t *dims,
                    const char *const *sym_names);

/* Initializer viewing caller memory that outlives the graph (the mmapped checkpoint). */
int graph_add_initializer_view(graph *g, const char *name, ph_dtype dtype, shape s,
                               const void *data);
/* Initializer whose bytes are copied into the graph (small constants, transformed weights). */
int graph_add_initializer_copy(graph *g, const char *name, ph_dtype dtype, shape s,
                               const void *data);
/* A 2-D initializer whose value is the transpose of the [rows, cols] matrix at src (a view into
 * the checkpoint): the value has shape [cols, rows]. Nothing is copied until
 * graph_initializer_data() is called. */
int graph_add_initializer_transposed(graph *g, const char *name, ph_dtype dtype, int64_t rows,
                                     int64_t cols, const void *src);
/* General lazy initializer: value of `dtype` and shape `s`, computed from src (src_dtype); if
 * transposed, s must be 2-D and src is read as [s.dims[1], s.dims[0]]. */
int graph_add_initializer_lazy(graph *g, const char *name, ph_dtype dtype, shape s, const void *src,
                               ph_dtype src_dtype, int transposed);
/* A lazy quantized initializer: `part` of the MatMulNBits form of the weight W [n, k] at src
 * (src_dtype f32/f16/bf16, row-major, any alignment; it must outlive the graph like a view) under
 * p. Dtype and shape follow from part and p (graph_quant_part). Nothing is computed here: the
 * exporter streams the bytes (graph_initializer_read quantizes the rows a range covers), the CPU
 * prepare pass quantizes into its resident copy, graph_initializer_data materializes on demand.
 * A weight that cannot be quantized (a NaN) fails there, as PH_ERR_NON_FINITE naming the value
 * and row. Bad params (quant_sizes), a non-float src_dtype, ZP of a symmetric p:
 * PH_ERR_INVALID_ARGUMENT (sticky). */
int graph_add_initializer_quant(graph *g, const char *name, graph_quant_part part,
                                const quant_params *p, int64_t n, int64_t k, const void *src,
                                ph_dtype src_dtype);
/* Rows [r0, r1) of the weight for n lazy quantized initializers of it (ids: parts of one weight,
 * same source and params, each part at most once): dst[i] receives part ids[i]'s bytes of those
 * rows (B: (r1-r0)*kb*blob bytes, ...). Each row is quantized once for all of them, where reading
 * the parts one by one (graph_initializer_read) quantizes it once per part: the CPU prepare pass
 * copies all parts of a weight this way. PH_ERR_INVALID_ARGUMENT when the ids are not such parts
 * or the rows are out of range; a weight's NaN: PH_ERR_NON_FINITE naming the rows. */
ph_status graph_quant_read_rows(const graph *g, const int *ids, int n, int64_t r0, int64_t r1,
                                void *const *dst, diag *d);
/* Owned initializer of the given shape, zeroed; returns the id and a writable pointer. */
int graph_add_initializer_alloc(graph *g, const char *name, ph_dtype dtype, shape s, void **data);

/* Adds a node. inputs: value ids (-1 for an absent optional slot). out_names: names of the new
 * intermediate values it produces (NULL entry = absent optional output). The node's output ids
 * are written to out_ids (may be NULL). attrs are copied. Returns the node index or -1. */
int graph_add_node(graph *g, const char *op_type, const char *domain, const char *name,
                   int n_inputs, const int *inputs, int n_outputs, const char *const *out_names,
                   int *out_ids, int n_attrs, const gattr *attrs);

/* Renames a value (unique names required). Returns the value id or -1. */
int graph_rename_value(graph *g, int value, const char *name);

/* Marks a value as a graph output (kept alive to the end). sym_names names its dims when its
 * rank is already known (graph inputs, initializers); for an intermediate whose rank inference
 * has not run yet use graph_name_dims. */
int graph_mark_output(graph *g, int value, const char *const *sym_names);

/* Names the first n dims of a value symbolically for export (NULL entry: anonymous). Any time. */
int graph_name_dims(graph *g, int value, int n, const char *const *sym_names);

/* Attribute constructors (strings/arrays are copied by graph_add_node). */
gattr attr_int(const char *name, int64_t v);
gattr attr_float(const char *name, float v);
gattr attr_string(const char *name, const char *v);
gattr attr_ints(const char *name, const int64_t *v, int n);
gattr attr_floats(const char *name, const float *v, int n);

/* Resolves ops and runs static inference over all nodes in order (nodes must be appended in a
 * topological order: a node's inputs exist before it). Fills every intermediate's tinfo.
 * PH_ERR_UNSUPPORTED lists all unknown op types at once; contract violations name the node. */
ph_status graph_finalize(graph *g, diag *d);

/* Hands a read-only file mapping to the graph: initializer views may point into it and it is
 * unmapped by graph_free(). */
struct fmap;
ph_status graph_adopt_mapping(graph *g, const struct fmap *m, diag *d);

/* Names a read-only private file mapping owned elsewhere (it must outlive the graph) that
 * initializer views may point into — a checkpoint's shards. The CPU prepare pass, once it has
 * copied the weights it reads out of such a mapping (or an adopted one), drops the copied pages
 * from the process (MADV_DONTNEED): they read back from the file if touched again, so the
 * mapping stays valid for its owner. Memory that is not named here is never released. */
ph_status graph_note_file_mapping(graph *g, const struct fmap *m, diag *d);

/* Writes elements [begin, end) of an initializer's canonical bytes into dst (for streaming
 * writers: never materializes the whole value). */
ph_status graph_initializer_read(const graph *g, int value, int64_t begin, int64_t end, void *dst,
                                 diag *d);

/* Canonical bytes of an initializer (materializes a lazy transpose into the graph arena once).
 * NULL with a diag on out of memory or for a non-initializer. */
const void *graph_initializer_data(graph *g, int value, diag *d);

/* ---- lookups ---- */
int graph_find_value(const graph *g, const char *name);   /* -1 if absent */
const gattr *node_attr(const gnode *n, const char *name); /* NULL if absent */
int64_t node_attr_int(const gnode *n, const char *name, int64_t def);
float node_attr_float(const gnode *n, const char *name, float def);
const char *node_attr_string(const gnode *n, const char *name, const char *def);

/* Bytes of a fully known tinfo; -1 if any dim is unknown or on overflow. */
int64_t tinfo_bytes(const tinfo *t);
int64_t tinfo_numel(const tinfo *t);
tinfo tinfo_make(ph_dtype dtype, int rank, const int64_t *dims);
const char *tinfo_format(const tinfo *t, char *buf, size_t n); /* "f32[2, ?, 64]" */

#endif /* PH_GRAPH_GRAPH_H */
