"""Decodes a pprof profile with Google's protocol buffer runtime, from a
schema declared here field by field (perftools.profiles, profile.proto),
and prints what it holds as JSON: the sample types, and each sample as
its function names (the sampled one first) and values.

    python3 pprof_decode.py PROFILE
"""
import json
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto


def message(fd, name, fields):
    m = fd.message_type.add(name=name)
    for number, fname, ftype, label, type_name in fields:
        f = m.field.add(name=fname, number=number, type=ftype, label=label)
        if type_name:
            f.type_name = ".perftools.profiles." + type_name


OPT, REP = F.LABEL_OPTIONAL, F.LABEL_REPEATED
fd = descriptor_pb2.FileDescriptorProto(
    name="profile.proto", package="perftools.profiles", syntax="proto3"
)
message(fd, "ValueType", [(1, "type", F.TYPE_INT64, OPT, None), (2, "unit", F.TYPE_INT64, OPT, None)])
message(fd, "Label", [(1, "key", F.TYPE_INT64, OPT, None), (2, "str", F.TYPE_INT64, OPT, None),
                      (3, "num", F.TYPE_INT64, OPT, None), (4, "num_unit", F.TYPE_INT64, OPT, None)])
message(fd, "Sample", [(1, "location_id", F.TYPE_UINT64, REP, None), (2, "value", F.TYPE_INT64, REP, None),
                       (3, "label", F.TYPE_MESSAGE, REP, "Label")])
message(fd, "Mapping", [(1, "id", F.TYPE_UINT64, OPT, None), (2, "memory_start", F.TYPE_UINT64, OPT, None),
                        (3, "memory_limit", F.TYPE_UINT64, OPT, None), (4, "file_offset", F.TYPE_UINT64, OPT, None),
                        (5, "filename", F.TYPE_INT64, OPT, None), (6, "build_id", F.TYPE_INT64, OPT, None),
                        (7, "has_functions", F.TYPE_BOOL, OPT, None), (8, "has_filenames", F.TYPE_BOOL, OPT, None),
                        (9, "has_line_numbers", F.TYPE_BOOL, OPT, None),
                        (10, "has_inline_frames", F.TYPE_BOOL, OPT, None)])
message(fd, "Line", [(1, "function_id", F.TYPE_UINT64, OPT, None), (2, "line", F.TYPE_INT64, OPT, None)])
message(fd, "Location", [(1, "id", F.TYPE_UINT64, OPT, None), (2, "mapping_id", F.TYPE_UINT64, OPT, None),
                         (3, "address", F.TYPE_UINT64, OPT, None), (4, "line", F.TYPE_MESSAGE, REP, "Line"),
                         (5, "is_folded", F.TYPE_BOOL, OPT, None)])
message(fd, "Function", [(1, "id", F.TYPE_UINT64, OPT, None), (2, "name", F.TYPE_INT64, OPT, None),
                         (3, "system_name", F.TYPE_INT64, OPT, None), (4, "filename", F.TYPE_INT64, OPT, None),
                         (5, "start_line", F.TYPE_INT64, OPT, None)])
message(fd, "Profile", [(1, "sample_type", F.TYPE_MESSAGE, REP, "ValueType"),
                        (2, "sample", F.TYPE_MESSAGE, REP, "Sample"),
                        (3, "mapping", F.TYPE_MESSAGE, REP, "Mapping"),
                        (4, "location", F.TYPE_MESSAGE, REP, "Location"),
                        (5, "function", F.TYPE_MESSAGE, REP, "Function"),
                        (6, "string_table", F.TYPE_STRING, REP, None),
                        (7, "drop_frames", F.TYPE_INT64, OPT, None), (8, "keep_frames", F.TYPE_INT64, OPT, None),
                        (9, "time_nanos", F.TYPE_INT64, OPT, None), (10, "duration_nanos", F.TYPE_INT64, OPT, None),
                        (11, "period_type", F.TYPE_MESSAGE, OPT, "ValueType"), (12, "period", F.TYPE_INT64, OPT, None),
                        (13, "comment", F.TYPE_INT64, REP, None),
                        (14, "default_sample_type", F.TYPE_INT64, OPT, None)])
pool = descriptor_pool.DescriptorPool()
pool.Add(fd)
Profile = message_factory.GetMessageClass(pool.FindMessageTypeByName("perftools.profiles.Profile"))

p = Profile()
with open(sys.argv[1], "rb") as f:
    p.ParseFromString(f.read())
s = list(p.string_table)
assert s[0] == "", "string 0 is empty"
functions = {f.id: f for f in p.function}
locations = {l.id: l for l in p.location}
mappings = {m.id: m for m in p.mapping}
out = {
    "sample_types": [[s[t.type], s[t.unit]] for t in p.sample_type],
    "samples": [],
    "mappings": [s[m.filename] for m in p.mapping],
    "files": sorted({s[f.filename] for f in p.function}),
}
for smp in p.sample:
    names = []
    for lid in smp.location_id:
        loc = locations[lid]
        assert loc.mapping_id == 0 or loc.mapping_id in mappings
        names.append(s[functions[loc.line[0].function_id].name])
    out["samples"].append({"functions": names, "values": list(smp.value)})
json.dump(out, sys.stdout)
