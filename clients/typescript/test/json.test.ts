// JSON as Python reads and writes it: RFC 8785, the number forms that differ between the
// languages (1.0 / 1, 1e-07 / 1e-7), exact integers, Python's repr and format "g", and
// version 1 plans (hashed as Python's json.dumps, exact from the plan's text).
import assert from "node:assert/strict";
import { test } from "node:test";
import { parsePlan } from "../src/checks.js";
import { canonical, floatAt, keysOf, parseJson, pythonDumps, stringify } from "../src/json.js";
import { PyFloat, pyFormatG, pyRepr } from "../src/pyformat.js";

test("RFC 8785: sorted keys by UTF-16 code units, ECMAScript numbers, minimal escapes", () => {
  assert.equal(canonical({ b: 1, a: [1.0, 1e-7, 1e21, -0, 0.1, 1 / 3, 100] }),
               '{"a":[1,1e-7,1e+21,0,0.1,0.3333333333333333,100],"b":1}');
  // U+FFFF after U+1F600 in UTF-16 code units (D83D < FFFF), before it in code points
  assert.equal(canonical({ "\uffff": 1, "\ud83d\ude00": 2, a: "\u2028\"\\/\u0001" }),
               '{"a":"\u2028\\"\\\\/\\u0001","\ud83d\ude00":2,"\uffff":1}');
  assert.throws(() => canonical({ x: NaN }), /not portable JSON/);
  assert.throws(() => canonical({ x: 2n ** 60n }), /beyond 2\^53 - 1/);
  assert.throws(() => canonical({ x: "\ud800" }), /lone surrogate/);
});

test("the parser keeps Python's numbers: exact big integers, floats written as floats", () => {
  const v = parseJson('{"i": 12345678901234567890, "f": 3.0, "g": 1e300, "n": -0, "k": [1, 1.0]}') as Record<string, unknown>;
  assert.equal(v["i"], 12345678901234567890n);
  assert.ok(floatAt(v, "f") && floatAt(v, "g") && !floatAt(v, "n"));
  assert.ok(floatAt(v["k"] as object, 1) && !floatAt(v["k"] as object, 0));
  assert.ok(Object.is(v["n"], 0));
  assert.deepEqual(keysOf(parseJson('{"b": 1, "10": 2, "a": 3, "0": 4}') as object), ["b", "10", "a", "0"]);
  for (const bad of ["{", "[1,]", "NaN", '{"a": Infinity}', '"\u0001"', "1 2", "{'a': 1}"]) {
    assert.throws(() => parseJson(bad), /not valid JSON/, bad);
  }
  assert.equal(stringify({ seed: 2n ** 62n + 1n }), '{"seed":4611686018427387905}');
});

test("Python's repr and format g of floats", () => {
  const cases: [number, string, string][] = [
    [1.0, "1.0", "1"], [1e-7, "1e-07", "1e-07"], [1e21, "1e+21", "1e+21"], [0.1, "0.1", "0.1"],
    [1e16, "1e+16", "1e+16"], [1234567.0, "1234567.0", "1.23457e+06"], [-0.0, "-0.0", "-0"],
    [18.0, "18.0", "18"], [0.0001, "0.0001", "0.0001"], [0.00001, "1e-05", "1e-05"],
    [123456.5, "123456.5", "123456"], [123457.5, "123457.5", "123458"], [2.5e-5, "2.5e-05", "2.5e-05"],
    [1 / 3, "0.3333333333333333", "0.333333"], [9999995, "9999995.0", "1e+07"],
  ];
  for (const [x, repr, g] of cases) {
    assert.equal(pyRepr(x), repr, `repr(${x})`);
    assert.equal(pyFormatG(x), g, `format(${x}, "g")`);
  }
});

test("Python's json.dumps for version 1 hashes: floats as written, ASCII escapes, code-point order", () => {
  const v = parseJson('{"b": [1, 1.0, 1e-07, 3.5], "a": "\u00e9\ud83d\ude00", "\ud83d\ude00": 0, "\uffff": 1}');
  assert.equal(pythonDumps(v),
               '{"a":"\\u00e9\\ud83d\\ude00","b":[1,1.0,1e-07,3.5],"\\uffff":1,"\\ud83d\\ude00":0}');
  assert.equal(pythonDumps({ e: new PyFloat(2) }), '{"e":2.0}');
});

test("a version 1 plan (the domain an object, numbers as written) hashes as Python's", async () => {
  // Computed with the Python reference: Plan.from_dict(body).hash for this text.
  const text = '{"format": "dpmarginals.plan", "version": 1, "method": "calm", "epsilon": 1, '
    + '"domain": {"sex": ["female", "male"], "age": {"bins": [0, 18, 65]}, "10": 3}, '
    + '"groups": [{"attributes": ["sex", "age"], "oracle": "grr", "epsilon": 1.0, "cells": 4}], '
    + '"params": {"k": 2, "theta": 1.0, "small": 1e-07, "n": 3}}';
  const hash = "0b1e33b158265f774450998fa7b37be3075847505807d11a1850e62b53aa1889";
  const plan = await parsePlan(text.replace(/}$/, `, "hash": "${hash}"}`));
  assert.equal(plan.hash, hash);
  assert.deepEqual(plan.domain.attributes, ["sex", "age", "10"]); // the text's order, not JS's
  // the same plan parsed by JSON.parse has lost "1.0" and the order: its hash differs (refused)
  await assert.rejects(parsePlan({ ...JSON.parse(text), hash }), /does not match the plan's content/);
});
