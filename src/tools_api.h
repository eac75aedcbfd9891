/* tools_api — the one internal header of the command-line tools (tools/cmd_*.c, cli.c).
 *
 * The tools serve through the public API (include/pagedhybrid.h: ph_model_*, ph_engine_*) like
 * any embedding program. What the public API does not carry, because it is not serving, comes
 * from here: writing packages, reading them back for inspection, writing random-weight test
 * checkpoints, the CLI's own file formats, and generate's dense reference layout. This header
 * names the internal headers those need and nothing that serves: no engine internals
 * (engine/engine.h), no paged session (runtime/paged_session.h), no pools (cache/), no ops.
 * tests/test_layers.sh checks both rules: a tool includes only pagedhybrid.h, this header and its
 * own tools/ headers, and this header includes only the list below.
 *
 * Why a header in src/ and not include/: include/ is installed and is what an embedder sees;
 * these are internal interfaces with no stability promise, whose symbols are hidden in the
 * installed libraries (docs/embedding.md). The CLI links the library's objects directly.
 *
 * What each tool takes from here:
 *   every tool   base/diag.h: diag, diag_set/diag_clear, FORWARD_IF_ERROR (their errors)
 *   cli.c        tensor/dtype.h: dtype_from_name (--dtype); base/fmap.h: path_* helpers
 *   export       models/export.h: model_export, export_options, the target and layout names;
 *                io/inference_metadata.h (the metadata an export writes)
 *   inspect      models/model.h (model_config, model_weights_of, model_check_finite: the
 *                checkpoint's config and weights behind a ph_model; through it
 *                models/weights.h weights_param_counts: active parameters); models/package.h
 *                (package_read, package_check_graph); io/genai_config.h, io/onnx.h (a
 *                package's files); tensor/tensor.h (nonfinite_scan over initializers)
 *   make-tiny,   models/tiny.h: tiny_params, tiny_apply_preset, tiny_write;
 *   demo         text/tiny_tokenizer.h: tiny_tokenizer_write (the tokenizer files beside them)
 *   serve, text  io/json_util.h: json_kind ("an array", ...) for the messages on request fields
 *   run          engine/request_file.h: the JSONL request file (docs/run.md) and its result
 *                lines; base/wfile.h (--out written whole); io/onnx.h: onnx_is_package
 *   bench        models/package.h: a package's parameter and initializer bytes; io/onnx.h
 *   generate     the paged layout runs on the engine (ph_engine_*); the dense layout on
 *                runtime/dense_session.h, the one header of a layer that runs a model: the
 *                engine serves only the paged graph, and the dense graph is the reference the
 *                golden logits were made with (tools/cmd_generate.c); models/package.h
 *                (package_read_graph for a dense package), io/genai_config.h, base/wfile.h
 */
#ifndef PH_TOOLS_API_H
#define PH_TOOLS_API_H

#include "base/diag.h"
#include "base/fmap.h"
#include "base/wfile.h"
#include "engine/request_file.h"
#include "io/genai_config.h"
#include "io/inference_metadata.h"
#include "io/json_util.h"
#include "io/onnx.h"
#include "models/export.h"
#include "models/model.h"
#include "models/package.h"
#include "models/tiny.h"
#include "pagedhybrid.h"
#include "runtime/dense_session.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"
#include "text/tiny_tokenizer.h"

#endif /* PH_TOOLS_API_H */
