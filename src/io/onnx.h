/* onnx — the graph IR as an ONNX package on disk, both ways.
 *
 * A package directory holds:
 *   model.onnx          ModelProto: IR version 8, opset imports ai.onnx 17 and com.microsoft 1,
 *                       the graph's nodes in order, inputs/outputs with symbolic dims, and every
 *                       initializer of ONNX_INLINE_MAX_BYTES or more as external data (location
 *                       "model.onnx.data", offset, length), so the 2 GB protobuf limit is never
 *                       reached; smaller ones inline as raw_data, because ONNX shape inference,
 *                       which ONNX Runtime runs at load, cannot read a shape-defining constant
 *                       (Reshape's shape, ReduceSum's axes) from external data — the same size
 *                       threshold as onnx.save_model's default;
 *   model.onnx.data     the external initializers' bytes, each at an offset aligned to
 *                       ONNX_DATA_ALIGN;
 *   genai_config.json   ONNX Runtime GenAI's config for the graph (io/genai_config.h);
 *   tokenizer files     copied from the checkpoint when it has them.
 * Serialization uses the protobuf-c code generated at build time from Debian's onnx.proto.
 *
 * Writing never materializes a transposed or converted weight in memory: lazy initializers
 * (graph.h) are streamed into model.onnx.data block by block. Nodes a CPU prepare pass made
 * (gnode.internal) and dead nodes are never written; exporting such a graph is an error.
 * Writing is deterministic: the same graph gives the same bytes (round trips are byte-exact).
 *
 * Reading validates everything it hands to the graph: malformed protobuf, messages nested deeper
 * than ONNX_MAX_NESTING (checked before decoding, without recursion), a missing or
 * unreadable data file, external data outside the data file (offset/length beyond its size,
 * overflow), a location that is not a plain file name in the package directory, raw_data whose
 * size does not match dtype x shape, unsupported dtypes — each a typed error naming the tensor.
 * Unsupported operators are reported all at once by graph_finalize(). The reader is fuzzed.
 */
#ifndef PH_IO_ONNX_H
#define PH_IO_ONNX_H

#include <stddef.h>
#include <stdint.h>

#include "base/diag.h"
#include "graph/graph.h"

#define ONNX_IR_VERSION       8
#define ONNX_OPSET_AI         17
#define ONNX_OPSET_MS         1
#define ONNX_DATA_ALIGN       64
#define ONNX_INLINE_MAX_BYTES 1024 /* initializers below this many bytes are written inline */
#define ONNX_MODEL_FILE       "model.onnx"
#define ONNX_DATA_FILE        "model.onnx.data"
/* metadata_props key of a structure-only package (onnx_write_model_structure); value "true" */
#define ONNX_META_CONFIG_ONLY "pagedhybrid.config_only"
/* Messages nested below ModelProto that a read accepts: protobuf's default recursion limit, the
 * one protobuf's C++ parser applies. Our own models nest 6 deep (ModelProto > GraphProto >
 * ValueInfoProto > TypeProto > Tensor > TensorShapeProto > Dimension); a deeper file is
 * PH_ERR_LIMIT before protobuf-c, which recurses once per level without a bound, decodes it. */
#define ONNX_MAX_NESTING      100
/* Fields (every tag: messages, strings, scalars) in the whole model.onnx that a read accepts.
 * protobuf-c allocates per message and per repeated string, about 150 bytes for an empty node
 * (measured: 2-byte empty NodeProtos decode at 75x their size), so a file of many tiny fields
 * costs far more memory than its size: 2^23 fields bound that at about 1.3 GB whatever the file.
 * Our 27B export holds about 10^5 fields; a DeepSeek-V3 graph with every expert's MatMul
 * unfused, about 3 x 10^6. */
#define ONNX_MAX_FIELDS       ((size_t)1 << 23)

/* Writes dir/model.onnx and dir/model.onnx.data from a finalized, unprepared graph. dir must
 * exist. producer names the tool in ModelProto.producer_name. */
ph_status onnx_write_model(graph *g, const char *dir, const char *producer, diag *d);

/* Progress of writing model.onnx.data: fn is called after every slice written (at most 32 MiB)
 * and after each external initializer, with the external initializers finished so far and in
 * all, and the data file's bytes written so far and in all (alignment padding included). On the
 * writing thread; it must not fail or call back into the writer. */
typedef void (*onnx_progress_fn)(void *user, int64_t tensors_done, int64_t tensors_total,
                                 int64_t bytes_done, int64_t bytes_total);
typedef struct onnx_progress {
  onnx_progress_fn fn; /* NULL: no progress */
  void *user;
} onnx_progress;

/* onnx_write_model reporting progress to p (NULL: none). */
ph_status onnx_write_model_progress(graph *g, const char *dir, const char *producer,
                                    const onnx_progress *p, diag *d);

/* For tests: onnx_write_model quantizing at most quant_rows weight rows per call of a lazy
 * quantized weight (0: as many as the 32 MiB write buffer holds), so that small weights reach the
 * multi-call paths, and counting in *rows_done (may be NULL) the weight rows quantized in all:
 * each weight's rows once when its parts are written (the pass of its first part keeps the later
 * small ones), not once per part. The bytes written do not depend on quant_rows. */
ph_status onnx_write_model_quant_rows(graph *g, const char *dir, const char *producer,
                                      int64_t quant_rows, int64_t *rows_done, diag *d);

/* The same model.onnx with every external initializer's location, offset and length laid out as
 * onnx_write_model would, but no model.onnx.data: a structure-only package (export
 * --config-only) for checking the graph of a model too big to materialize. Inline initializers
 * (< 1024 bytes) are written as usual, with whatever bytes the graph holds (the placeholder's
 * zeros for weights). ModelProto.metadata_props carries ONNX_META_CONFIG_ONLY = "true", so a
 * reader tells this package from one that lost its data file: onnx_read_model refuses it
 * (PH_ERR_INVALID_ARGUMENT: no weights, cannot run) unless asked for its structure
 * (ONNX_READ_CONFIG_ONLY). */
ph_status onnx_write_model_structure(graph *g, const char *dir, const char *producer, diag *d);

/* Reads dir/model.onnx (+ its external data, mapped read-only and owned by the graph) into a
 * new graph, finalized. External data must be a plain file name in dir (no '/', no "..") that
 * does not resolve outside dir (ONNX Runtime's rule); initializers whose bytes there are aligned
 * for their dtype are views of the mapping, others are copied. docs/import.md has every rule. */
ph_status onnx_read_model(const char *dir, graph **out, diag *d);

/* 1 when dir holds model.onnx or genai_config.json (whose decoder.filename may name another
 * graph file): a package (the CLI and the engine then read it, through models/package.h, instead
 * of treating dir as a Hugging Face checkpoint). */
int onnx_is_package(const char *dir);

/* Parses a ModelProto held in memory (no external data allowed unless data/data_size give the
 * bytes of model.onnx.data; those bytes are copied, so the buffers need not outlive the graph).
 * The fuzzer drives this. */
ph_status onnx_parse_model(const uint8_t *bytes, size_t size, const uint8_t *data, size_t data_size,
                           graph **out, diag *d);

/* What a read reports about the file besides the graph (for inspect). */
typedef struct onnx_model_info {
  int64_t ir_version;
  int64_t opset_ai, opset_ms; /* imported versions; 0 when the domain is not imported */
  char producer_name[64], producer_version[32];
  int64_t n_initializers;
  int64_t initializer_bytes;   /* data of every initializer */
  int64_t external_data_bytes; /* the part of it stored in external files */
  int n_external_files;
  int n_symbols_dropped; /* dim_param names beyond the graph's symbol table (dims
                            stay unknown, only the names are not kept) */
  int config_only;       /* metadata_props says ONNX_META_CONFIG_ONLY: a structure-only package */
} onnx_model_info;

/* Flags of onnx_read_model_ex / onnx_read_model_file. */
enum {
  ONNX_READ_FINALIZE = 1, /* finalize the graph (without it, see onnx_read_model_ex) */
  /* A structure-only package (info.config_only) is read instead of refused: its external
   * initializers get their declared dtype and shape but no data (type.data NULL; the data file
   * is not opened, even when one is there), and still count in info's totals. The graph
   * describes the model and must never be run. A package without the marker reads as usual. */
  ONNX_READ_CONFIG_ONLY = 2,
};

/* onnx_read_model with options (ONNX_READ_*). Without ONNX_READ_FINALIZE the graph is validated
 * and built but not finalized (graph outputs then carry their declared dtype and shape): a
 * package whose operators this build cannot run can still be described, and graph_finalize()
 * says why it cannot run. info (may be NULL) receives the header fields and data totals. */
ph_status onnx_read_model_ex(const char *dir, unsigned flags, graph **out, onnx_model_info *info,
                             diag *d);

/* onnx_read_model_ex for dir/filename: filename a plain file name (no '/', no ".."; else
 * PH_ERR_INVALID_ARGUMENT). External data still resolves in dir. models/package.h reads the file
 * a genai_config.json names this way. */
ph_status onnx_read_model_file(const char *dir, const char *filename, unsigned flags, graph **out,
                               onnx_model_info *info, diag *d);

#endif /* PH_IO_ONNX_H */
