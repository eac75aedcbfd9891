/* inference_metadata_write — inference_metadata.json from the table (inference_metadata_abi.h):
 * one builder per part of the document, in one fixed key order (JSON_PRESERVE_ORDER) so the same
 * graph and genai_config give the same bytes. The document is run through the checker
 * (inference_metadata_check.c) before it is written. See inference_metadata.h.
 */
#include "io/inference_metadata.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "io/inference_metadata_abi.h"
#include "io/json_util.h"

/* Adds value under key; on any failure (value NULL, no memory) clears *ok. Steals value. */
static void put(json_t *obj, const char *key, json_t *value, int *ok) {
  if (!obj || !value || json_object_set_new(obj, key, value) != 0) *ok = 0;
}

static json_t *layout_json(const md_abi *a, const md_io *io, int *ok) {
  char buf[MD_NAME_BYTES];
  json_t *o = json_object();
  switch (io->layout) {
  case MD_SHARED:
    json_decref(o);
    return NULL;
  case MD_REQUEST_ALIGNED:
    put(o, "kind", json_string("request_aligned"), ok);
    put(o, "axis", json_integer(io->axis), ok);
    break;
  case MD_TOKEN_PACKED: {
    const char *cu = md_prefixed(MD_REQUEST, a->gc->cumulative_sequence_lengths, buf, sizeof buf);
    put(o, "kind", json_string("token_packed"), ok);
    put(o, "offsets", json_string(cu), ok);
    put(o, "owner", json_string(cu), ok);
    put(o, "axis", json_integer(io->axis), ok);
    break;
  }
  case MD_RUNTIME_STATE:
    put(o, "kind", json_string("runtime_sequence_state"), ok);
    break;
  }
  if (!o) *ok = 0;
  return o;
}

static json_t *contract_json(const md_abi *a, const md_io *io, int *ok) {
  const gvalue *v = md_io_value(a, io);
  char buf[MD_NAME_BYTES];
  json_t *c = json_object(), *dims_j = json_array();
  put(c, "dtype", json_string(md_dtype_json_name(v->type.dtype)), ok);
  put(c, "rank", json_integer(v->type.rank), ok);
  for (int k = 0; dims_j && k < v->type.rank; k++) {
    const char *sym = md_dim_symbol(a->g, v, k, buf, sizeof buf);
    if (json_array_append_new(dims_j, sym ? json_string(sym) : json_integer(v->type.dims[k])) != 0)
      *ok = 0;
  }
  put(c, "shape", dims_j, ok);
  if (io->layout != MD_SHARED) put(c, "batch_layout", layout_json(a, io, ok), ok);
  return c;
}

static json_t *model_json(const md_abi *a, int *ok) {
  const genai_config *gc = a->gc;
  json_t *m = json_object(), *att = json_object();
  put(att, "type", json_string(md_attention_type(a)), ok);
  put(att, "num_kv_heads", json_integer(gc->num_key_value_heads), ok);
  put(att, "num_attention_heads", json_integer(gc->num_attention_heads), ok);
  put(att, "head_dim", json_integer(gc->head_size), ok);
  put(m, "attention", att, ok);
  put(m, "max_sequence_length", json_integer(gc->context_length), ok);
  put(m, "vocab_size", json_integer(gc->vocab_size), ok);
  return m;
}

static json_t *workflow_inputs_json(const md_abi *a, int *ok) {
  char buf[MD_NAME_BYTES];
  json_t *ins = json_object();
  for (int i = 0; a->serving && i < MD_N_SERVING_INPUTS; i++) {
    json_t *in = json_object(), *c = json_object(), *dims_j = json_array(), *bl = json_object();
    put(c, "dtype", json_string(md_serving_inputs[i].dtype), ok);
    put(c, "rank", json_integer(1), ok);
    if (json_array_append_new(dims_j, json_string(a->batch_sym)) != 0) *ok = 0;
    put(c, "shape", dims_j, ok);
    put(bl, "kind", json_string("request_aligned"), ok);
    put(bl, "axis", json_integer(0), ok);
    put(c, "batch_layout", bl, ok);
    json_t *role = json_object(), *src = json_object();
    put(role, "kind", json_string("opaque"), ok);
    put(src, "kind", json_string("application"), ok);
    put(src, "name", json_string(md_serving_inputs[i].app_name), ok);
    put(in, "contract", c, ok);
    put(in, "role", role, ok);
    put(in, "source", src, ok);
    put(in, "required", json_true(), ok);
    put(ins, md_serving_inputs[i].name, in, ok);
  }
  for (int i = 0; i < a->n_io; i++) {
    const md_io *io = &a->io[i];
    if (io->is_output) continue;
    const char *name = md_io_value(a, io)->name;
    json_t *in = json_object(), *role = json_object(), *src = json_object();
    put(in, "contract", contract_json(a, io, ok), ok);
    if (io->kind == MD_TOKENS) {
      put(role, "kind", json_string("runtime"), ok);
      put(role, "version", json_string("1.0"), ok);
      put(role, "role", json_string("prompt_tokens"), ok);
      put(src, "kind", json_string("request"), ok);
    } else {
      put(role, "kind", json_string("opaque"), ok);
      put(src, "kind", json_string("application"), ok);
      put(src, "name", json_string(name), ok);
    }
    put(in, "role", role, ok);
    put(in, "source", src, ok);
    put(in, "required", json_true(), ok);
    put(ins, md_prefixed(MD_REQUEST, name, buf, sizeof buf), in, ok);
  }
  return ins;
}

static json_t *outputs_json(const md_abi *a, int *ok) {
  json_t *outs = json_object(), *o = json_object();
  put(o, "contract", contract_json(a, md_find_io(a, MD_LOGITS, -1, 1), ok), ok);
  put(o, "role", json_string("tensor"), ok);
  put(o, "stage", json_string("pre_adapter"), ok);
  put(outs, MD_LOGITS_OUTPUT, o, ok);
  return outs;
}

/* PagedAttention's name for the slot a control input fills (abi.md §1.2). */
static const char *paged_slot(md_kind k) {
  switch (k) {
  case MD_BLOCK_TABLE:
    return "block_table";
  case MD_CU_SEQLENS:
    return "cumulative_sequence_length";
  case MD_PAST_SEQLENS:
    return "past_seqlens";
  case MD_ATTN_METADATA:
    return "attention_metadata";
  case MD_SLOT_MAPPING:
    return "slot_mapping";
  default:
    return NULL;
  }
}

static const char *kv_binding_name(const md_io *io, char *buf, size_t n) {
  snprintf(buf, n, "layer.%d.%s_cache%s", io->layer, io->kind == MD_KEY ? "key" : "value",
           io->is_output ? "_out" : "");
  return buf;
}

static json_t *paged_contract_json(const md_abi *a, int *ok) {
  char buf[MD_NAME_BYTES];
  json_t *c = json_object(), *b = json_object(), *p = json_object();
  put(c, "id", json_string(INFERENCE_METADATA_PAGED_KV_CONTRACT), ok);
  put(c, "version", json_string(MD_CONTRACT_VERSION), ok);
  for (int i = 0; i < a->n_io; i++)
    if (paged_slot(a->io[i].kind))
      put(b, paged_slot(a->io[i].kind), json_string(md_io_value(a, &a->io[i])->name), ok);
  for (int l = 0; l < a->kv.n; l++)
    for (int out = 0; out < 2; out++)
      for (md_kind k = MD_KEY; k <= (a->latent ? MD_KEY : MD_VALUE); k++) {
        const md_io *io = md_find_io(a, k, a->kv.id[l], out);
        put(b, kv_binding_name(io, buf, sizeof buf), json_string(md_io_value(a, io)->name), ok);
      }
  put(c, "bindings", b, ok);
  put(p, "block_size", json_integer(a->gc->dynamic_batching.block_size), ok);
  put(p, "aliasing", json_string("required"), ok);
  /* absent: SEPARATE (PagedAttention's default), so SEPARATE packages keep their bytes */
  if (a->latent) put(p, MD_PARAM_KV_LAYOUT, json_string(MD_KV_LAYOUT_LATENT), ok);
  put(c, "parameters", p, ok);
  return c;
}

static json_t *component_json(const md_abi *a, int *ok) {
  json_t *comp = json_object(), *impl = json_object(), *ports = json_object();
  json_t *ins = json_object(), *outs = json_object(), *roles = json_object();
  put(impl, "kind", json_string("onnx"), ok);
  put(impl, "artifact", json_string(a->gc->filename), ok);
  for (int i = 0; i < a->n_io; i++) {
    const md_io *io = &a->io[i];
    const char *name = md_io_value(a, io)->name;
    put(io->is_output ? outs : ins, name, contract_json(a, io, ok), ok);
    const char *role = io->kind == MD_TOKENS      ? "token_ids"
                       : io->kind == MD_POSITIONS ? "position_ids"
                       : io->kind == MD_MASK      ? "attention_mask"
                       : io->kind == MD_LOGITS    ? "logits"
                                                  : NULL;
    if (role) put(roles, name, json_string(role), ok);
  }
  put(ports, "inputs", ins, ok);
  put(ports, "outputs", outs, ok);
  put(ports, "roles", roles, ok);
  put(comp, "implementation", impl, ok);
  put(comp, "ports", ports, ok);
  if (a->paged && a->kv.n > 0) put(comp, "contract", paged_contract_json(a, ok), ok);
  return comp;
}

static json_t *state_json(const md_abi *a, int *ok) {
  char cell[MD_NAME_BYTES], buf[MD_NAME_BYTES];
  json_t *st = json_object();
  for (int i = 0; i < a->n_io; i++) {
    const md_io *io = &a->io[i];
    const int kv = io->kind == MD_KEY || io->kind == MD_VALUE;
    if (io->is_output || (io->kind != MD_CONV && io->kind != MD_RECURRENT && !(kv && !a->paged)))
      continue;
    json_t *c = json_object(), *rec = json_object();
    put(c, "contract", contract_json(a, io, ok), ok);
    put(c, "scope", json_string("invocation"), ok);
    put(c, "initializer",
        json_string(md_prefixed(MD_REQUEST, md_io_value(a, io)->name, buf, sizeof buf)), ok);
    put(rec, "kind", json_string("invariant"), ok);
    put(c, "recurrence", rec, ok);
    put(c, "management", json_string("runtime"), ok);
    put(c, "release_boundary", json_string("row"), ok);
    put(c, "service_group",
        json_string(kv                    ? MD_GROUP_DENSE_KV
                    : io->kind == MD_CONV ? MD_GROUP_CONV
                                          : MD_GROUP_RECURRENT),
        ok);
    put(st, md_state_cell_name(io, cell, sizeof cell), c, ok);
  }
  return st;
}

static json_t *steps_json(const md_abi *a, int *ok) {
  char buf[MD_NAME_BYTES];
  json_t *steps = json_array(), *inv = json_object(), *emit = json_object();
  json_t *ins = json_object(), *outs = json_object();
  put(inv, "kind", json_string("invoke"), ok);
  put(inv, "component", json_string(MD_COMPONENT), ok);
  for (int i = 0; i < a->n_io; i++) {
    const char *name = md_io_value(a, &a->io[i])->name;
    put(a->io[i].is_output ? outs : ins, name,
        json_string(md_prefixed(a->io[i].is_output ? MD_STEP : MD_REQUEST, name, buf, sizeof buf)),
        ok);
  }
  put(inv, "inputs", ins, ok);
  put(inv, "outputs", outs, ok);
  put(emit, "kind", json_string("emit"), ok);
  put(emit, "value", json_string(md_prefixed(MD_STEP, a->gc->logits, buf, sizeof buf)), ok);
  put(emit, "output", json_string(MD_LOGITS_OUTPUT), ok);
  put(emit, "mode", json_string("replace"), ok);
  if (!steps || json_array_append_new(steps, inv) != 0 || json_array_append_new(steps, emit) != 0)
    *ok = 0;
  return steps;
}

/* One state-service group: kind, geometry and one alias per layer tensor of `kind`. */
static json_t *group_json(const md_abi *a, md_kind kind, int *ok) {
  char cell[MD_NAME_BYTES];
  const int kv = kind == MD_KEY;
  json_t *grp = json_object(), *upd = json_object(), *ports = json_object(), *dec = json_object();
  put(grp, "kind", json_string(kv ? "full_attention" : "recurrent"), ok);
  if (kv) put(grp, "sequence_axis", json_integer(2), ok);
  put(grp, "layout", json_string(md_group_layout(a, kind)), ok);
  put(grp, "aliasing", json_string(a->paged ? "permitted" : "forbidden"), ok);
  put(upd, "kind", json_string(kv ? "append" : "replace"), ok);
  put(grp, "update", upd, ok);
  for (int i = 0; i < a->n_io; i++) {
    const md_io *io = &a->io[i];
    if (io->is_output || !(io->kind == kind || (kv && io->kind == MD_VALUE))) continue;
    const md_io *out = md_find_io(a, io->kind, io->layer, 1);
    json_t *al = json_object();
    put(al, "input", json_string(md_io_value(a, io)->name), ok);
    put(al, "output", json_string(md_io_value(a, out)->name), ok);
    if (kv) put(al, "role", json_string(io->kind == MD_KEY ? "key" : "value"), ok);
    put(al, "layer", json_integer(io->layer), ok);
    put(dec, md_state_cell_name(io, cell, sizeof cell), al, ok);
  }
  put(ports, MD_COMPONENT, dec, ok);
  put(grp, "ports", ports, ok);
  return grp;
}

static json_t *serving_json(const md_abi *a, int *ok) {
  json_t *sv = json_object(), *ss = json_object(), *groups = json_object();
  put(sv, "active", json_string(md_serving_inputs[0].name), ok);
  put(sv, "done", json_string(md_serving_inputs[1].name), ok);
  put(sv, "accepted_len", json_string(md_serving_inputs[2].name), ok);
  if (!a->paged && a->kv.n > 0) put(groups, MD_GROUP_DENSE_KV, group_json(a, MD_KEY, ok), ok);
  if (a->conv.n > 0) put(groups, MD_GROUP_CONV, group_json(a, MD_CONV, ok), ok);
  if (a->rec.n > 0) put(groups, MD_GROUP_RECURRENT, group_json(a, MD_RECURRENT, ok), ok);
  put(ss, "groups", groups, ok);
  put(sv, "state_service", ss, ok);
  return sv;
}

/* The capabilities the workflow uses, as onnx-genai's validator derives them (sorted). */
static json_t *capabilities_json(const md_abi *a, int *ok) {
  json_t *caps = json_array();
  if (!caps) *ok = 0;
  if (a->serving && json_array_append_new(caps, json_string("serving_service_contract")) != 0)
    *ok = 0;
  if (json_array_append_new(caps, json_string("typed_emit")) != 0) *ok = 0;
  if (json_array_append_new(caps, json_string("workflow_ssa")) != 0) *ok = 0;
  return caps;
}

static json_t *document_json(const md_abi *a, int *ok) {
  json_t *root = json_object(), *pipe = json_object(), *wf = json_object(), *man = json_object();
  put(root, "schema_version", json_string(MD_SCHEMA_VERSION), ok);
  put(root, "model", model_json(a, ok), ok);
  put(man, "capabilities", capabilities_json(a, ok), ok);
  put(wf, "manifest", man, ok);
  put(wf, "inputs", workflow_inputs_json(a, ok), ok);
  put(wf, "outputs", outputs_json(a, ok), ok);
  json_t *comps = json_object();
  put(comps, MD_COMPONENT, component_json(a, ok), ok);
  put(wf, "components", comps, ok);
  put(wf, "state", state_json(a, ok), ok);
  put(wf, "steps", steps_json(a, ok), ok);
  if (a->serving) put(wf, "serving", serving_json(a, ok), ok);
  put(pipe, "workflow", wf, ok);
  put(root, "pipeline", pipe, ok);
  return root;
}

ph_status inference_metadata_write(const graph *g, const genai_config *gc, const char *dir,
                                   diag *d) {
  RETURN_ERROR_IF(!g || !gc || !dir, d, PH_ERR_INVALID_ARGUMENT,
                  "inference_metadata_write: NULL argument");
  char path[4096];
  FORWARD_IF_ERROR(path_join(path, sizeof path, dir, INFERENCE_METADATA_FILE, d));
  md_abi a;
  FORWARD_IF_ERROR(md_abi_build(g, gc, &a, d));
  int ok = 1;
  json_t *root = document_json(&a, &ok);
  md_abi_free(&a);
  char *text = ok ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
  json_decref(root);
  RETURN_ERROR_IF(!text, d, PH_ERR_NO_MEMORY, "out of memory building %s", path);
  size_t n = strlen(text);
  ph_status s = inference_metadata_check_text(text, n, path, g, gc, d);
  if (s != PH_OK) {
    diag_prefix(d, "inference_metadata_write refuses its own document");
    free(text);
    return s == PH_ERR_NO_MEMORY ? s : PH_ERR_INTERNAL;
  }
  return json_text_write(path, text, d);
}
