-- Argo CD health check for streamjob.io/StreamJob.
-- Install: argocd-cm data key `resource.customizations.health.streamjob.io_StreamJob`
-- (see docs/gitops.md). Reads the kstatus conditions the operator writes.
local hs = { status = "Progressing", message = "Waiting for the operator" }

local function condition(status, type)
  if status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == type then
      return c
    end
  end
  return nil
end

local function is_true(c)
  return c ~= nil and c.status == "True"
end

local status = obj.status
if status == nil then
  return hs
end
local generation = obj.metadata and obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.message = "The operator has not seen generation " .. tostring(generation) .. " yet"
  return hs
end

local stalled = condition(status, "Stalled")
local reconciling = condition(status, "Reconciling")
local degraded = condition(status, "Degraded")
local ready = condition(status, "Ready")

if is_true(stalled) then
  hs.status = "Degraded"
  hs.message = (stalled.reason or "Stalled") .. ": " .. (stalled.message or "")
elseif status.phase == "Suspended" then
  hs.status = "Suspended"
  hs.message = "The job is suspended"
elseif is_true(reconciling) then
  hs.status = "Progressing"
  hs.message = (reconciling.reason or "Reconciling") .. ": " .. (reconciling.message or "")
elseif is_true(degraded) then
  hs.status = "Degraded"
  hs.message = (degraded.reason or "Degraded") .. ": " .. (degraded.message or "")
elseif status.phase == "Finished" then
  hs.status = "Healthy"
  hs.message = "The job has finished"
elseif is_true(ready) then
  hs.status = "Healthy"
  hs.message = ready.message or "The job runs"
elseif ready ~= nil then
  hs.message = (ready.reason or "NotReady") .. ": " .. (ready.message or "")
end
return hs
