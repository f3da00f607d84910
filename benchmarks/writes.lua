-- wrk script for benchmarks/writes.sh: each request adds one item to a random cart of
-- CARTS (default 1 000); counts the acknowledged (200) writes over every thread.
local carts = tonumber(os.getenv("CARTS") or "1000")
local threads = {}

function setup(thread)
    table.insert(threads, thread)
end

function init(args)
    ok = 0
    math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16) % 100000)
end

function request()
    local cart = math.random(carts)
    local body = string.format('{"sku":"s%d","quantity":1,"unitPriceCents":100}', math.random(20))
    return wrk.format("POST", "/carts/c" .. cart .. "/items", { ["Content-Type"] = "application/json" }, body)
end

function response(status, headers, body)
    if status == 200 then ok = ok + 1 end
end

function done(summary, latency, requests)
    local acknowledged = 0
    for _, thread in ipairs(threads) do acknowledged = acknowledged + thread:get("ok") end
    io.write(string.format('{"acknowledged":%d,"requests":%d,"errors":%d,"seconds":%.3f,"p50":%.3f,"p99":%.3f}\n',
        acknowledged, summary.requests, summary.errors.connect + summary.errors.read + summary.errors.write
            + summary.errors.status + summary.errors.timeout,
        summary.duration / 1e6, latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
