-- The corpus is built offline: an image becomes its alt text and raw <img> tags are dropped, so pandoc
-- neither fetches a remote picture nor fails on a local one the vault does not hold.
function Image(el)
  return el.caption
end

local function without_img(el)
  if el.format == "html" and el.text:find("<img") then
    el.text = el.text:gsub("<img[^>]*>", "")
  end
  return el
end

RawInline = without_img
RawBlock = without_img
