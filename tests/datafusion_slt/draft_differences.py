"""Drafts tests/datafusion_slt/differences.txt from the report that
tests/datafusion_slt.rs writes (the path it prints): one line per record
that passes on stock DataFusion and fails on quiverdb, with a reason
guessed from the error. Review the draft before committing it.

    python3 tests/datafusion_slt/draft_differences.py REPORT > draft.txt
"""
import re
import sys

t = open(sys.argv[1]).read()
ents=re.split(r'^== ',t,flags=re.M)[1:]
out=[]
last_root={}  # file -> (line, reason)
def reason_of(body):
    first=body.split('\n')[0]
    if 'not found' in first or "doesn't exist" in first:
        return None
    if 'which quiverdb does not support' in first:
        ty=re.search(r"has type (\w+)",first).group(1)
        return f"type: {ty} columns are not stored yet"
    if first.startswith('query columns mismatch') and '[Expected] [?]' in body:
        return "by design: dictionary and run-end encoded input is stored as its value type, which results have"
    if 'Unable to find factory for CSV' in first:
        return "by design: CREATE EXTERNAL TABLE reads files, and no statement reaches the file system"
    if 'cannot create schema' in first or 'Deregistering new schemas' in first or 'failed to resolve schema' in first:
        return "schemas: CREATE/DROP SCHEMA not yet supported"
    if "'datafusion." in body and "'quiverdb." in body:
        return "by design: the catalog is named quiverdb, not datafusion"
    if 'show columns' in body.lower() and 'quiverdb public' in body:
        return "by design: the catalog is named quiverdb, not datafusion"
    if 'TRUNCATE not supported' in body:
        return "EXPLAIN text: quiverdb plans TRUNCATE (stock DataFusion cannot)"
    if re.search(r'\[SQL\]\s*explain', body, re.I):
        return "EXPLAIN text: quiverdb's scans, pushed-down filters and plans"
    if "declared as non-nullable" in body and "is NOT NULL" in body:
        return "error text: quiverdb names the table's column, DataFusion the VALUES column"
    return None
for e in ents:
    head,_,body=e.partition('\n')
    f,line=head.split(':')
    r=reason_of(body)
    first=body.split('\n')[0]
    if r is None:
        if f in last_root:
            r=f"follows from line {last_root[f][0]} ({last_root[f][1]})"
        elif r is None:
            r="UNKNOWN: "+first[:100]
    else:
        if not r.startswith('follows'):
            last_root[f]=(line,r)
    out.append(f"{f}:{line}  {r}")
print('\n'.join(out))
